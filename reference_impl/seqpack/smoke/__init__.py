"""The packing smoke test, all of it: options, the run, the paths' adapters and the VLM pieces."""
