"""Step snapshots -> pi events, pure: the assembler, the ending rule, tool runs, diffs.

Imports the root, wire/, pi/ and agy/.
"""
