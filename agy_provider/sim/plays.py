"""Which scenario each turn of one agy-sim process plays, when it is not the process's own.

Owns `TurnPlays`, read once at start: `AGY_SIM_TURNS` (else the scenario's `process_turns`) lists,
for turn 1, 2, … of the process, `NAME` (that scenario's first turn), `NAME#K` (its K-th turn) or
`-` (the process's scenario as usual); turns past the list play as usual. A prompt containing
`[agy-sim:NAME]` or `[agy-sim:NAME#K]` (the last one, when it holds several) plays that instead,
whatever the list says. NAME is a built-in scenario or a `.json` path, as `AGY_SIM_SCENARIO`
takes. A played turn counts its scenario's step faults from its own first row (`TurnPlay`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from agy_provider.errors import UsageError
from agy_provider.sim.scenario import Scenario
from agy_provider.sim.scenario import TurnPlay
from agy_provider.sim.scenario import load_scenario

__all__ = ["MARKER", "TURNS_ENV", "TurnPlays"]

TURNS_ENV = "AGY_SIM_TURNS"
MARKER = re.compile(r"\[agy-sim:([^\]\s#]+)(?:#([1-9][0-9]{0,3}))?\]")
_ITEM = re.compile(r"([^\s#,]+)(?:#([1-9][0-9]{0,3}))?")


class TurnPlays:
    """The per-turn plays of one process. Raises `UsageError` at construction for a list that
    names a scenario that does not load, so a bad `AGY_SIM_TURNS` fails before `init`."""

    def __init__(self, scenario: Scenario, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        raw = env.get(TURNS_ENV, "").strip()
        items = raw.split(",") if raw else list(scenario.process_turns)
        where = TURNS_ENV if raw else f"scenario {scenario.name!r} process_turns"
        self._loaded: dict[str, Scenario] = {}
        self._by_turn: list[TurnPlay | None] = []
        for item in items:
            item = item.strip()
            if item in ("", "-"):
                self._by_turn.append(None)
                continue
            match = _ITEM.fullmatch(item)
            if match is None:
                raise UsageError(f"{where}: {item!r} is not NAME, NAME#TURN or -")
            self._by_turn.append(self._play(match[1], match[2], where))

    def _play(self, name: str, turn: str | None, where: str) -> TurnPlay:
        if name not in self._loaded:
            try:
                self._loaded[name] = load_scenario(name)
            except UsageError as exc:
                raise UsageError(f"{where}: {exc}") from exc
        return TurnPlay(self._loaded[name], int(turn or 1) - 1)

    def for_turn(self, number: int, prompt: str) -> TurnPlay | None:
        """What turn `number` (1-based, of this process) with `prompt` plays; None: as usual.

        Raises `UsageError` when the prompt's marker names no loadable scenario.
        """
        # The last marker wins: a host's prompt puts the newest input after the history it
        # resends, and a marker quoted from an earlier turn must not replay that turn's scenario.
        markers = list(MARKER.finditer(prompt))
        if markers:
            marker = markers[-1]
            return self._play(marker[1], marker[2], f"[agy-sim:{marker[1]}]")
        if 1 <= number <= len(self._by_turn):
            return self._by_turn[number - 1]
        return None
