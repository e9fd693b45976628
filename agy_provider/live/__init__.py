"""A live turn: the driver and its collaborators, the runner, binding, the prompt.

Imports every floor below it (root … bridge).
"""
