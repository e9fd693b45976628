"""Bytes to values, sans-I/O: the protobuf walker, Connect framing, NDJSON lines, strict JSON.

Imports only the root (errors).
"""
