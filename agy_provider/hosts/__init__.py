"""One module per pi host framework: the glue each needs to run agy-provider its own way.

`pi_ai_python`, `pi_agent_core`, `pi_ai_client` (with pi-agent-loop) and `pi_agents_py`; each is
tested with the host's real package (the `hosts` extra) and imports it only when used.
"""
