"""Saved conversations: replay, listing and export, formatters.

Imports every floor below live/ and nothing of live/.
"""
