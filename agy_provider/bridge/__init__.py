"""Host tools over MCP (the official SDK): the bridge agy calls and a turn's host tools.

Imports every floor below it (root, wire, pi, agy, assembly, rpc, store).
"""
