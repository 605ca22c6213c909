"""The file-access layer every command uses for every path it opens, reads or writes."""
