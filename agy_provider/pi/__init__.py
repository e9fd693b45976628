"""pi's contract: its types, events, options and stream, and bringing any pi port's values into them.

Imports only the root (errors) and wire/.
"""
