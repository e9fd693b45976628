"""`agy-provider export` and `conversations` over a folder holding more than databases: every
`*.db` entry that is not a regular file is skipped with a warning naming it and why, unopened."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES

from agy_provider.offline.conversations import export_conversations

AGY_PROVIDER = os.path.join(os.path.dirname(sys.executable), "agy-provider")


def _folder(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A conversations folder: one real database, and odd `*.db` entries with what each is."""
    folder = tmp_path / "conversations"
    folder.mkdir()
    real = sorted((FIXTURES / "db").glob("*.db"))[0]
    shutil.copy(real, folder / real.name)
    (folder / "a-folder.db").mkdir()
    os.mkfifo(folder / "a-fifo.db")  # opening it would block until someone writes
    (folder / "dangling.db").symlink_to(tmp_path / "nowhere")
    (folder / "a-device.db").symlink_to("/dev/null")
    odd = {
        "a-folder.db": "a folder",
        "a-fifo.db": "a FIFO",
        "dangling.db": "a broken symbolic link",
        "a-device.db": "a character device",
    }
    return folder, odd


def test_export_warns_for_each_entry_it_skips_and_still_exports_the_rest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder, odd = _folder(tmp_path)
    with caplog.at_level(logging.WARNING, logger="agy_provider.offline.conversations"):
        result = export_conversations(folder, tmp_path / "out", workers=1)
    assert len(result.written) == 1 and result.failed == ()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    # Before: skipped without a word.
    assert len(warnings) == len(odd), warnings
    for name, what in odd.items():
        (line,) = [w for w in warnings if str(folder / name) in w]
        assert what in line and "skipped" in line


def test_the_command_line_says_what_it_skipped_without_blocking_on_a_fifo(tmp_path: Path) -> None:
    folder, odd = _folder(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGY_", "ANTIGRAVITY_"))}
    env["HOME"] = str(tmp_path)
    done = subprocess.run(
        [AGY_PROVIDER, "export", str(tmp_path / "out"), "--folder", str(folder)],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,  # opening the FIFO would hang here for ever
    )
    assert done.returncode == 0, done.stderr
    for name, what in odd.items():
        assert f"skipped {folder / name}: {what}" in done.stderr, done.stderr
    assert "wrote 1 file(s)" in done.stderr
