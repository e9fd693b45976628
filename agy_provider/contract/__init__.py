"""The turn's contract: the values a plugin or host receives (the turn's context, event sources,
host tools, a parked turn). Imports only the floors below it (root … store), never what runs a turn.
"""
