"""Texts of pi's provider suite (pi-mono `packages/ai/test`) that both its Python run and its
TypeScript run against serve send: emoji and other scripts, and a lone surrogate.
"""

from __future__ import annotations

LONE_HIGH = "\ud83d"  # pi's String.fromCharCode(0xd83d): a high surrogate without its low half
EMOJI = (
    "Test with emoji 🙈 and other characters:\n- Thumbs up: 👍\n- Heart: ❤️\n- Thinking face: 🤔\n"
    "- Mixed text: Mario Zechner wann? Wo? Bin grad äußersr eventuninformiert 🙈\n"
    "- Japanese: こんにちは\n- Chinese: 你好\n- Mathematical symbols: ∑∫∂√\n"
    "- Special quotes: \"curly\" 'quotes'"
)
