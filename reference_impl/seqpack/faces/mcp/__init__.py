"""Parts of the MCP server (:mod:`seqpack.faces.mcp.server`): path confinement, error mapping,
output schemas, tool groups, resources and prompts, and the long-running job hook.

Inside the package, ``seqpack.faces.mcp`` never shadows the ``mcp`` SDK: imports are absolute and the
package's folders are never on ``sys.path``.
"""
