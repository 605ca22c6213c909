"""The faces of the verbs: the command line (:mod:`.cli`), the MCP server (:mod:`.mcp`) and skill installation."""
