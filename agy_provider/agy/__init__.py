"""Facts about agy: the normalized Step, the decoders of its rows, RPC JSON and stream-json, its
database, argv, stdout, `result`, state folder and models.

Imports the root, wire/ and pi/.
"""
