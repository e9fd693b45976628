"""A turn's options as one frozen value (`live/turn_options`): `stream_simple`'s keywords are its
fields, one to one, and reading it never changes what the caller passed."""

from __future__ import annotations

import dataclasses
import inspect
import os
from pathlib import Path

import pytest

from agy_provider.live.provider import stream_simple
from agy_provider.live.turn_edges import TurnEdges
from agy_provider.live.turn_options import TurnOptions
from agy_provider.store.sessions import SessionStore


def test_stream_simples_keywords_are_the_turn_options_fields_with_their_defaults() -> None:
    keywords = {
        name: p.default
        for name, p in inspect.signature(stream_simple).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }
    fields = {f.name: f.default for f in dataclasses.fields(TurnOptions)}
    assert keywords == fields


def test_turn_options_are_frozen() -> None:
    how = TurnOptions(agy_bin="agy")
    with pytest.raises(dataclasses.FrozenInstanceError):
        how.agy_bin = "other"  # type: ignore[misc]


def test_the_store_goes_into_new_edges_never_into_the_callers(tmp_path: Path) -> None:
    theirs = TurnEdges(store=SessionStore(tmp_path / "theirs.json"))
    ours = SessionStore(tmp_path / "ours.json")
    edges = TurnOptions(edges=theirs, store=ours).turn_edges()
    assert edges.store is ours and theirs.store is not ours
    assert TurnOptions(edges=theirs).turn_edges() is theirs
    assert TurnOptions(store=ours).turn_edges().store is ours


def test_a_named_conversation_continues_and_an_executor_runs_the_hosts_tools() -> None:
    assert not TurnOptions().continues and TurnOptions().host_runs_tools
    assert TurnOptions(continue_session=True).continues
    assert TurnOptions(conversation_id="c").continues
    assert not TurnOptions(tool_executor=lambda call: "ok").host_runs_tools


def test_no_cwd_is_the_current_folder_once_the_turn_starts(tmp_path: Path) -> None:
    given = TurnOptions(cwd=str(tmp_path))
    assert given.in_folder() is given
    assert TurnOptions().in_folder().cwd == os.getcwd()
