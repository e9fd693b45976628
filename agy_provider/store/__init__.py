"""What we keep on disk: sessions, settings, the model catalog, atomic writes.

Imports the root, wire/, pi/, agy/, assembly/ and rpc/.
"""
