"""Parts of the MCP server (:mod:`reference_impl.mcp_server`): path confinement, error mapping,
output schemas, tool groups, resources and prompts, and the long-running job hook.

Named ``mcp_support`` rather than ``mcp`` so that it can never shadow the ``mcp`` SDK package.
"""
