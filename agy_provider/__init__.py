"""agy-provider: Google's Antigravity CLI (agy) as a streaming model provider.

The package root only re-exports; implementation modules are private.
"""

from __future__ import annotations

__version__ = "0.1.0"
