"""What the pi-ai suites send and read, shared by the 0.73 tier (`test_serve_pi_ts`) and the
1.6 tier (`test_serve_pi_messages_ts`): pi messages as JSON, the host tool, their texts and calls."""

from __future__ import annotations

from typing import Any

from host_helpers import TOOL_PARAMETERS

NOW = 1_700_000_000_000


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content, "timestamp": NOW}


def tool_result(call_id: str, name: str, content: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "role": "toolResult",
        "toolCallId": call_id,
        "toolName": name,
        "content": content,
        "isError": False,
        "timestamp": NOW,
    }


LOOKUP = {
    "name": "lookup_order",
    "description": "Look up an order's status by its id.",
    "parameters": TOOL_PARAMETERS,
}


TOOL_PROMPT = "Where is my order A-1042? [agy-sim:mcp-host-tool]"


def text(message: dict[str, Any]) -> str:
    return "".join(b["text"] for b in message["content"] if b["type"] == "text")


def calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for b in message["content"] if b["type"] == "toolCall"]
