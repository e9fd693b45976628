"""agy's language server: which server is our run's, the Connect client, the loopback transport.

Imports the root, wire/, pi/, agy/ and assembly/.
"""
