"""Binding a turn to its database: by the id agy states, the id resumed, or our open files."""

from __future__ import annotations

import asyncio
from pathlib import Path

import psutil
import pytest

from agy_provider.discovery import bind_database
from agy_provider.errors import TurnError

CID = "5f1c2d3e-4a5b-4c6d-8e7f-9a0b1c2d3e4f"


class Agy:
    """A binding subject: what agy stated, whether it exited, and its (empty) process tree."""

    def __init__(self, stated: str = "", returncode: int | None = None) -> None:
        self.stated_conversation_id = stated
        self.returncode = returncode
        self.id_stated = asyncio.Event()
        self.scans = 0

    async def scan_tree(self) -> list[psutil.Process]:
        self.scans += 1
        return []


async def test_the_stated_id_binds_without_scanning_or_reading(tmp_path: Path) -> None:
    other = tmp_path / "00000000-0000-4000-8000-000000000000.db"
    other.write_bytes(b"")  # another run's new database: never a candidate
    (tmp_path / f"{CID}.db").write_bytes(b"")
    agy = Agy(stated=CID)
    binding = await bind_database(tmp_path, set(), agy, prompt="hi", timeout=5)
    assert binding.conversation_id == CID and agy.scans == 0


async def test_an_agy_that_states_nothing_and_exits_unseen_is_not_guessed(tmp_path: Path) -> None:
    (tmp_path / f"{CID}.db").write_bytes(b"")  # the only new database, but nothing proves it
    agy = Agy(returncode=0)
    with pytest.raises(TurnError, match="could not prove which database"):
        await bind_database(tmp_path, set(), agy, prompt="hi", timeout=5, states_id=False)
    assert agy.scans >= 1  # it looked at our tree's open files, and found none


async def test_a_different_stated_id_than_the_resumed_one_is_refused(tmp_path: Path) -> None:
    resumed = "11111111-1111-4111-8111-111111111111"
    (tmp_path / f"{resumed}.db").write_bytes(b"")
    with pytest.raises(TurnError, match="not reading either"):
        await bind_database(
            tmp_path, set(), Agy(stated=CID), prompt="hi", timeout=5, expected_id=resumed
        )
