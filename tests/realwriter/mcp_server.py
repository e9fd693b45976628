"""A stdio MCP server with one tool, for the real-writer MCP scenario (run by localharness)."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

app = MCPServer("inventory")


@app.tool()
def lookup(key: str) -> str:
    """Look up a key in the inventory."""
    return f"inventory[{key}] = 42 widgets"


if __name__ == "__main__":
    app.run()
