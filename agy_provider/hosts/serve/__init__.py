"""`agy-provider serve`: the provider behind OpenAI- and Anthropic-compatible HTTP endpoints, each
wire API a thin codec over the same turn (the app, the door, the owners, the converters, the shapes)."""
