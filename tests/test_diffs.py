"""agy's edits as unified diffs: old text from git's HEAD (real repositories in temporary folders)
or from the turn's previous edit, new text from the call's arguments; capped; binary and
outside-a-repository files said in one line; and the live path reads git only off the loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from agy_provider.agy.step import Step
from agy_provider.agy.step import StepKind
from agy_provider.agy.step import StepStatus
from agy_provider.agy.step import ToolCall
from agy_provider.agy.step import ToolResult
from agy_provider.assembly.assembler import StepAssembler
from agy_provider.assembly.diffs import MAX_DIFF_LINES
from agy_provider.assembly.diffs import Baseline
from agy_provider.assembly.diffs import EditLedger
from agy_provider.assembly.diffs import GitBaselines
from agy_provider.assembly.diffs import edit_diff
from agy_provider.assembly.diffs import git_head_text
from agy_provider.assembly.diffs import looks_like_diff
from agy_provider.assembly.tool_runs import render_tool_run
from agy_provider.assembly.tool_runs import tool_run

NOTES = "alpha\nbeta\ngamma\ndelta\n"


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        timeout=60,
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A real repository whose HEAD holds notes.txt, src/app.py and a binary logo.png."""
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "notes.txt").write_text(NOTES)
    (root / "src" / "app.py").write_text("".join(f"line {n}\n" for n in range(1, 31)))
    (root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (root / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "start")
    return root


def edit(index: int, name: str, status: StepStatus = StepStatus.DONE, **arguments: Any) -> Step:
    return Step(
        index=index,
        kind=StepKind.TOOL,
        status=status,
        tool=ToolCall(id=f"t{index}", name=name, arguments=arguments),
        result=ToolResult(output=""),
    )


def blocks(assembler: StepAssembler, steps: list[Step]) -> list[str]:
    assembler.feed(steps)
    final = assembler.finish()[-1]
    message = final.error if final.type == "error" else final.message  # type: ignore[union-attr]
    return [block.thinking for block in message.content]  # type: ignore[union-attr]


def test_a_replacement_is_diffed_against_head_with_real_line_numbers(repo: Path) -> None:
    step = edit(
        1,
        "replace_file_content",
        TargetFile=str(repo / "src" / "app.py"),
        TargetContent="line 20\n",
        ReplacementContent="line twenty\n",
        StartLine=20,
        EndLine=20,
    )
    rendered = render_tool_run(step, EditLedger(GitBaselines(blocking=True)))
    assert rendered == (
        f"▸ replace_file_content {repo}/src/app.py\n"
        "  --- a/src/app.py\n"
        "  +++ b/src/app.py\n"
        "  @@ -17,7 +17,7 @@\n"
        "   line 17\n"
        "   line 18\n"
        "   line 19\n"
        "  -line 20\n"
        "  +line twenty\n"
        "   line 21\n"
        "   line 22\n"
        "   line 23\n"
    )


def test_the_old_side_is_head_not_the_edited_file_on_disk(repo: Path) -> None:
    # agy has already written the file when its step settles: the disk holds the new text.
    (repo / "notes.txt").write_text(NOTES.replace("beta", "BETA"))
    step = edit(
        1,
        "replace_file_content",
        TargetFile=str(repo / "notes.txt"),
        TargetContent="beta",
        ReplacementContent="BETA",
    )
    lines = render_tool_run(step, EditLedger(GitBaselines(blocking=True))).splitlines()
    assert "  -beta" in lines and "  +BETA" in lines
    assert "  @@ -1,4 +1,4 @@" in lines


def test_later_edits_of_a_file_start_from_the_previous_edit(repo: Path) -> None:
    path = str(repo / "notes.txt")
    assembler = StepAssembler(model="m", turn_start=-1, baselines=GitBaselines(blocking=True))
    first = edit(
        1, "replace_file_content", TargetFile=path, TargetContent="beta", ReplacementContent="B"
    )
    second = edit(
        2,
        "multi_replace_file_content",
        TargetFile=path,
        # The generic 140.1 map keeps values as strings: chunks arrive as JSON text.
        ReplacementChunks=json.dumps(
            [
                {"TargetContent": "B\n", "ReplacementContent": "B2\n"},
                {"TargetContent": "delta", "ReplacementContent": "d1\nd2", "StartLine": 4},
            ]
        ),
    )
    one, two = blocks(assembler, [first, second])
    assert "  -beta\n  +B\n" in one
    # The second edit's old side is what the first left ("B"), which HEAD never held.
    assert "  -B\n  +B2\n" in two
    assert "  -delta\n  +d1\n  +d2\n" in two
    assert "  --- a/notes.txt\n  +++ b/notes.txt\n" in two


def test_a_new_file_is_diffed_from_dev_null(repo: Path) -> None:
    step = edit(
        3,
        "write_to_file",
        TargetFile=str(repo / "src" / "new.py"),
        CodeContent="print('new')\n",
        Overwrite=False,
    )
    rendered = render_tool_run(step, EditLedger(GitBaselines(blocking=True)))
    assert rendered.splitlines()[1:] == [
        "  --- /dev/null",
        "  +++ b/src/new.py",
        "  @@ -0,0 +1 @@",
        "  +print('new')",
    ]


def test_an_overwrite_is_diffed_against_head(repo: Path) -> None:
    step = edit(
        4,
        "write_to_file",
        TargetFile=str(repo / "notes.txt"),
        CodeContent="alpha\nbeta\n",
        Overwrite=True,
    )
    lines = render_tool_run(step, EditLedger(GitBaselines(blocking=True))).splitlines()
    assert lines[1:4] == ["  --- a/notes.txt", "  +++ b/notes.txt", "  @@ -1,4 +1,2 @@"]
    assert lines[-2:] == ["  -gamma", "  -delta"]


def test_outside_a_repository_the_edit_is_shown_from_its_call_with_one_note(
    tmp_path: Path,
) -> None:
    loose = tmp_path / "loose"
    loose.mkdir()
    assert git_head_text(str(loose / "a.py")).note == "outside a git repository"
    step = edit(
        5,
        "replace_file_content",
        TargetFile=str(loose / "a.py"),
        TargetContent="x = 1\ny = 2\n",
        ReplacementContent="x = 1\ny = 3\n",
        StartLine=10,
        EndLine=11,
    )
    lines = render_tool_run(step, EditLedger(GitBaselines(blocking=True))).splitlines()
    assert lines[1] == "  (the edit alone: outside a git repository)"
    # Hunks are numbered from the call's StartLine.
    assert lines[2:] == [
        f"  --- {loose}/a.py",
        f"  +++ {loose}/a.py",
        "  @@ -10,2 +10,2 @@",
        "   x = 1",
        "  -y = 2",
        "  +y = 3",
    ]


def test_binary_and_undecodable_files_are_one_line(repo: Path) -> None:
    for name in ("logo.png", "latin1.txt"):
        baseline = git_head_text(str(repo / name))
        assert baseline.binary and baseline.text is None, baseline
        step = edit(
            6,
            "write_to_file",
            TargetFile=str(repo / name),
            CodeContent="text now\n",
            Overwrite=True,
        )
        lines = render_tool_run(step, EditLedger(GitBaselines(blocking=True))).splitlines()
        assert lines[1:] == ["  binary file: no diff shown"]
    # New content with a NUL in it is binary too, whatever HEAD holds.
    nul = edit_diff("write_to_file", {"TargetFile": "/x/b.bin", "CodeContent": "a\x00b"})
    assert nul.lines == ("binary file: no diff shown",)


def test_a_long_diff_ends_in_a_count_of_the_lines_left_out(repo: Path) -> None:
    text = "".join(f"row {n}\n" for n in range(500))
    step = edit(7, "write_to_file", TargetFile=str(repo / "big.txt"), CodeContent=text)
    lines = render_tool_run(step, EditLedger(GitBaselines(blocking=True))).splitlines()
    shown = lines[1:]
    assert len(shown) == MAX_DIFF_LINES + 1
    # 3 header lines and 500 added lines: 503 in all.
    assert shown[-1] == f"  … ({503 - MAX_DIFF_LINES} more lines)"


def test_a_target_head_does_not_hold_falls_back_to_the_call_saying_why(repo: Path) -> None:
    step = edit(
        8,
        "replace_file_content",
        TargetFile=str(repo / "notes.txt"),
        TargetContent="omega",
        ReplacementContent="psi",
    )
    lines = render_tool_run(step, EditLedger(GitBaselines(blocking=True))).splitlines()
    assert lines[1] == "  (the edit alone: HEAD's text does not hold the replaced lines)"
    assert lines[-2:] == ["  -omega", "  +psi"]


def test_a_recorded_diff_stands_in_for_the_arguments() -> None:
    step = Step(
        index=9,
        kind=StepKind.TOOL,
        status=StepStatus.DONE,
        step_type=5,
        tool=ToolCall(id="", name="replace_file_content", arguments={"TargetFile": "/w/n.txt"}),
        result=ToolResult(output=" alpha\n-beta\n+gamma"),
    )
    assert render_tool_run(step) == "▸ replace_file_content /w/n.txt\n   alpha\n  -beta\n  +gamma\n"
    assert looks_like_diff(" alpha\n-beta\n+gamma")
    assert not looks_like_diff("Created file /w/n.txt")


def test_words_in_an_edits_result_follow_its_diff() -> None:
    step = edit(10, "write_to_file", TargetFile="/w/x.py", CodeContent="pass\n", Overwrite=False)
    step = dataclasses.replace(step, result=ToolResult(output="Created file /w/x.py"))
    run = tool_run(step)
    assert run is not None and run.name == "write_to_file"
    assert run.output.splitlines() == [
        "--- /dev/null",
        "+++ /w/x.py",
        "@@ -0,0 +1 @@",
        "+pass",
        "Created file /w/x.py",
    ]


def test_a_failed_edit_is_shown_from_its_call_and_leaves_the_file_as_it_was(repo: Path) -> None:
    path = str(repo / "notes.txt")
    assembler = StepAssembler(model="m", turn_start=-1, baselines=GitBaselines(blocking=True))
    failed = Step(
        index=1,
        kind=StepKind.TOOL,
        status=StepStatus.ERROR,
        tool=ToolCall(
            id="",
            name="replace_file_content",
            arguments={"TargetFile": path, "TargetContent": "beta", "ReplacementContent": "X"},
        ),
        result=ToolResult(output="target not found", is_error=True),
    )
    after = edit(
        2, "replace_file_content", TargetFile=path, TargetContent="beta", ReplacementContent="Y"
    )
    one, two = blocks(assembler, [failed, after])
    assert "  failed: target not found" in one
    assert "(the edit alone: the earlier text was not looked up)" in one
    assert "  -beta\n  +Y\n" in two and "a/notes.txt" in two


def test_a_settled_edit_renders_once_even_if_head_moves_later(repo: Path) -> None:
    path = str(repo / "notes.txt")
    step = edit(
        1, "replace_file_content", TargetFile=path, TargetContent="beta", ReplacementContent="B"
    )
    assembler = StepAssembler(model="m", turn_start=-1, baselines=GitBaselines(blocking=True))
    first = assembler.feed([step])
    (repo / "notes.txt").write_text("other\n")
    git(repo, "commit", "-q", "-am", "moved")
    assert first and assembler.feed([step]) == []  # nothing to retract, nothing new


def test_the_live_provider_answers_from_its_cache_and_loads_off_the_loop(repo: Path) -> None:
    baselines = GitBaselines()
    path = str(repo / "notes.txt")
    running = edit(1, "write_to_file", StepStatus.RUNNING, TargetFile=path, CodeContent="x\n")
    done = edit(1, "write_to_file", TargetFile=path, CodeContent="x\n", Overwrite=True)
    assert baselines(path) == Baseline.unknown("not looked up")
    assert baselines.wanted([running]) == []  # only settled edits are diffed
    assert baselines.wanted([done]) == [path]
    main_thread: list[bool] = []

    def reader(target: str) -> Baseline:
        import threading

        main_thread.append(threading.current_thread() is threading.main_thread())
        return git_head_text(target)

    loaded = GitBaselines(reader=reader)
    asyncio.run(loaded.prefetch([done]))
    assert main_thread == [False]  # git ran in a worker thread
    assert loaded(path).text == NOTES
    assert loaded.wanted([done]) == []


def test_git_missing_or_relative_paths_are_said_not_raised(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert git_head_text("notes.txt").note == "a relative path"
    monkeypatch.setenv("PATH", str(repo / "no-such-bin"))
    assert git_head_text(str(repo / "notes.txt")).note == "git is not installed"


def test_relative_targets_are_read_from_the_turns_folder(repo: Path) -> None:
    baselines = GitBaselines(str(repo), blocking=True)
    assert baselines("notes.txt").text == NOTES


def test_a_file_too_large_to_diff_whole_is_shown_from_the_call(repo: Path) -> None:
    big = repo / "big.txt"
    big.write_text("".join(f"entry {n}\n" for n in range(6000)))
    git(repo, "add", "big.txt")
    git(repo, "commit", "-q", "-m", "big")
    step = edit(
        1,
        "replace_file_content",
        TargetFile=str(big),
        TargetContent="entry 5000\n",
        ReplacementContent="entry five thousand\n",
        StartLine=5001,
        EndLine=5001,
    )
    lines = render_tool_run(step, EditLedger(GitBaselines(blocking=True))).splitlines()
    assert lines[1] == "  (the edit alone: the file is too large to diff)"
    assert lines[4:] == ["  @@ -5001 +5001 @@", "  -entry 5000", "  +entry five thousand"]


def test_git_is_asked_about_the_files_own_repository_whatever_git_dir_says(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    assert git_head_text(str(repo / "notes.txt")).text == NOTES


def test_a_huge_call_is_shown_line_by_line_without_difflib() -> None:
    target = "".join(f"old {n}\n" for n in range(10_000))
    arguments = {"TargetFile": "/x/a.txt", "TargetContent": target, "ReplacementContent": "new\n"}
    lines = edit_diff("replace_file_content", arguments).lines
    assert lines[1:5] == ("--- /x/a.txt", "+++ /x/a.txt", "@@ -1,10000 +1,1 @@", "-old 0")
    # The note, 80 diff lines, and the count of the rest: 3 headers + 10,001 lines in all.
    assert lines[-1] == f"… ({10_004 - MAX_DIFF_LINES} more lines)"


_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(), st.text(max_size=40), st.lists(st.text(max_size=5))
)
_CHUNK = st.dictionaries(
    st.sampled_from(["TargetContent", "ReplacementContent", "StartLine", "EndLine",
                     "AllowMultiple"]),
    _VALUES,
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    name=st.sampled_from(["write_to_file", "replace_file_content", "multi_replace_file_content"]),
    arguments=st.fixed_dictionaries(
        {},
        optional={
            "TargetFile": _VALUES,
            "CodeContent": _VALUES,
            "Overwrite": _VALUES,
            "TargetContent": _VALUES,
            "ReplacementContent": _VALUES,
            "StartLine": _VALUES,
            "ReplacementChunks": st.one_of(_VALUES, st.lists(_CHUNK, max_size=3)),
        },
    ),
    old=st.one_of(st.none(), st.text(max_size=200)),
)
def test_any_call_renders_a_bounded_diff_and_never_raises(
    name: str, arguments: dict[str, Any], old: str | None
) -> None:
    baseline = Baseline(text=old, tracked=old is not None, path="f.txt")
    diff = edit_diff(name, arguments, baseline=baseline)
    assert len(diff.lines) <= MAX_DIFF_LINES + 2  # a note, the lines shown, a count
    assert all("\n" not in line for line in diff.lines)


@settings(max_examples=200, deadline=None)
@given(
    before=st.text(alphabet="ab\n", max_size=60),
    target=st.text(alphabet="ab\n", min_size=1, max_size=8),
    after=st.text(alphabet="ab\n", max_size=60),
    replacement=st.text(alphabet="cd\n", max_size=8),
)
def test_a_replacement_found_in_the_old_text_is_applied_there(
    before: str, target: str, after: str, replacement: str
) -> None:
    old = before + target + after
    arguments = {"TargetFile": "/r/f", "TargetContent": target, "ReplacementContent": replacement}
    diff = edit_diff("replace_file_content", arguments, baseline=Baseline(text=old, tracked=True))
    assert diff.new_text is not None
    at = old.find(target)
    assert diff.new_text == old[:at] + replacement + old[at + len(target) :]


def test_a_start_line_of_non_ascii_digits_is_no_line_number() -> None:
    """Found by the property test above on a clean clone: "²".isdigit() is True, int("²") raises."""
    diff = edit_diff("replace_file_content", {"StartLine": "²", "TargetContent": "a"})
    assert diff.lines is not None
