"""Built-in plugins of agy-provider, installed as `agy_provider.plugins`.

Each module implements hooks from `agy_provider.hookspecs` and imports nothing private.
"""
