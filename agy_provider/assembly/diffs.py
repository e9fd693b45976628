"""agy's file edits as unified diffs: the old text from git's HEAD or an earlier edit of the turn.

Pure diffing (`edit_diff`, `EditLedger`) plus one I/O edge, `GitBaselines`, which reads a file's
text at HEAD with git (argv lists, bounded time and size) and is loaded off the event loop.

Design. The assembler is pure and synchronous and runs on the host's loop, so it never runs git:
it asks a *baseline provider* — any `Callable[[str], Baseline]` — for a file's old text, and
renders from the call's arguments alone when the provider says the text is unknown. A live turn
gives it a `GitBaselines` that only answers from its cache, which the turn fills in a worker thread
(`await baselines.prefetch(steps)`) before it feeds those steps; replay, which is synchronous
anyway, gives one that reads git on a miss (`blocking=True`). Within a turn an `EditLedger`
carries each file's text from one edit to the next and remembers every step's rendering, so a
step re-fed later renders exactly as it did the first time (the assembler only emits growth).
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import subprocess
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

__all__ = [
    "EDIT_TOOLS",
    "MAX_DIFF_LINES",
    "Baseline",
    "BaselineProvider",
    "EditDiff",
    "EditLedger",
    "GitBaselines",
    "edit_diff",
    "edit_target",
    "git_head_text",
    "looks_like_diff",
    "render_recorded_diff",
]

# Tools whose run is an edit of one file (agy's names, and Google's runtime's code action).
EDIT_TOOLS = frozenset(
    {"replace_file_content", "multi_replace_file_content", "write_to_file", "code_action"}
)

# Diff lines shown per edit; the rest is counted in a "… (N more lines)" tail. A whole rewritten
# file would otherwise flood a transcript, and the file itself is on disk.
MAX_DIFF_LINES = 80
# One shown diff line at most this long: minified files have lines of megabytes.
MAX_LINE_CHARS = 400
# Texts past either bound are not diffed as a whole (difflib is quadratic at worst, and this runs
# on the host's loop): the edit is shown from its arguments instead, saying why.
MAX_DIFF_INPUT_LINES = 5000
MAX_DIFF_INPUT_CHARS = 1_000_000
# A HEAD blob larger than this is not read at all (it would not be diffed anyway).
MAX_BASELINE_BYTES = 2_000_000
# Each git command may take this long; a slow network filesystem must not hold a turn.
GIT_TIMEOUT = 5.0
# git's own binary-file heuristic looks for a NUL in the first 8000 bytes.
_BINARY_PROBE = 8000


@dataclasses.dataclass(frozen=True, slots=True)
class Baseline:
    """What is known about a file's text before the turn edited it.

    `text` is the text at HEAD ("" for a file git does not have at HEAD: `tracked` is then
    False); None when unknown, with `note` saying why in a few words ("outside a git
    repository", "binary file", …). `path` is the file's path relative to its repository
    (diff headers then say `a/<path>` and `b/<path>`), "" outside one.
    """

    text: str | None = None
    note: str = ""
    tracked: bool = False
    path: str = ""
    binary: bool = False

    @classmethod
    def unknown(cls, note: str, *, binary: bool = False) -> Baseline:
        return cls(text=None, note=note, binary=binary)


BaselineProvider = Callable[[str], Baseline]


# -- the edit itself (pure) -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class _Chunk:
    target: str
    replacement: str
    start_line: int | None = None
    end_line: int | None = None
    allow_multiple: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class EditDiff:
    """One edit rendered: its diff lines (unindented) and the file's whole text after it, when
    that is known (the next edit of the same file in the turn starts from it)."""

    lines: tuple[str, ...]
    new_text: str | None


def edit_target(arguments: Mapping[str, Any]) -> str:
    """The file an edit call changes (`TargetFile`), or ""."""
    target = arguments.get("TargetFile")
    return target if isinstance(target, str) else ""


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        text = value.strip()
        # ASCII digits only: "²".isdigit() is True, but int("²") raises.
        if text.isascii() and text.isdigit():
            return int(text)
    return None


def _chunk(data: Mapping[str, Any]) -> _Chunk:
    allow = data.get("AllowMultiple")
    return _Chunk(
        target=_text(data.get("TargetContent")),
        replacement=_text(data.get("ReplacementContent")),
        start_line=_int(data.get("StartLine")),
        end_line=_int(data.get("EndLine")),
        allow_multiple=allow is True or (isinstance(allow, str) and allow.lower() == "true"),
    )


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


def _chunks(name: str, arguments: Mapping[str, Any]) -> list[_Chunk]:
    if name == "replace_file_content":
        return [_chunk(arguments)]
    raw = arguments.get("ReplacementChunks")
    if isinstance(raw, str):  # agy-sim and the generic 140.1 map keep JSON values as strings
        from agy_provider.errors import DecodeError
        from agy_provider.wire import jsontext

        try:  # strict: 3,000-deep JSON here raised RecursionError out of a replay
            raw = jsontext.loads(raw, "ReplacementChunks")
        except DecodeError:
            raw = None
    if not isinstance(raw, list):
        return []
    return [_chunk(c) for c in raw if isinstance(c, Mapping)]


def _is_binary(text: str) -> bool:
    return "\x00" in text[:_BINARY_PROBE]


def _too_large(text: str) -> bool:
    return len(text) > MAX_DIFF_INPUT_CHARS or text.count("\n") > MAX_DIFF_INPUT_LINES


def _offset_of_line(text: str, line: int) -> int:
    """The character offset where 1-based `line` starts (the end of `text` past its last line)."""
    position = 0
    for _ in range(max(line - 1, 0)):
        found = text.find("\n", position)
        if found < 0:
            return len(text)
        position = found + 1
    return position


def _apply(old: str, chunks: Sequence[_Chunk]) -> str | None:
    """`old` with every chunk replaced, or None when a chunk's target is not in it.

    A chunk with a line range replaces the occurrence nearest that range (agy's own tool does
    the same: the range disambiguates repeated text); `AllowMultiple` replaces every one.
    """
    text = old
    for chunk in chunks:
        if not chunk.target:
            return None
        if chunk.allow_multiple:
            if chunk.target not in text:
                return None
            text = text.replace(chunk.target, chunk.replacement)
            continue
        hint = _offset_of_line(text, chunk.start_line) if chunk.start_line else 0
        before = text.rfind(chunk.target, 0, hint + len(chunk.target)) if hint else -1
        after = text.find(chunk.target, hint)
        candidates = [p for p in (before, after) if p >= 0]
        if not candidates:
            return None
        at = min(candidates, key=lambda p: abs(p - hint))
        text = text[:at] + chunk.replacement + text[at + len(chunk.target) :]
    return text


def _header_names(path: str, baseline: Baseline | None) -> tuple[str, str]:
    """The diff's `---`/`+++` names: `a/…`, `b/…` relative to the repository, else the path."""
    if baseline is not None and baseline.path:
        return f"a/{baseline.path}", f"b/{baseline.path}"
    return path or "file", path or "file"


def _unified(old: str, new: str, old_name: str, new_name: str) -> list[str]:
    lines = list(
        difflib.unified_diff(
            old.splitlines(), new.splitlines(), old_name, new_name, n=3, lineterm=""
        )
    )
    if lines and old and new and old.endswith("\n") != new.endswith("\n"):
        lines.append("\\ No newline at end of file")
    return lines


_HUNK = re.compile(r"@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@")


def _shift_hunks(lines: list[str], offset: int) -> list[str]:
    """Renumber a snippet diff's hunk headers to where the snippet sits in its file."""
    if offset <= 0:
        return lines

    def shift(match: re.Match[str]) -> str:
        old, new = int(match.group(1)), int(match.group(3))
        return (
            f"@@ -{old + offset if old else offset}{match.group(2) or ''} "
            f"+{new + offset if new else offset}{match.group(4) or ''} @@"
        )

    return [_HUNK.sub(shift, line, count=1) if line.startswith("@@") else line for line in lines]


def _snippet_lines(old_name: str, new_name: str, chunks: Sequence[_Chunk]) -> list[str]:
    """The edit from its arguments alone: each chunk's replaced text against its replacement."""
    lines: list[str] = []
    for chunk in chunks:
        if _too_large(chunk.target) or _too_large(chunk.replacement):
            # Too long for difflib on the loop: every old line out, every new line in.
            old, new = chunk.target.splitlines(), chunk.replacement.splitlines()
            start = chunk.start_line or 1
            diff = [
                f"--- {old_name}",
                f"+++ {new_name}",
                f"@@ -{start},{len(old)} +{start},{len(new)} @@",
                *("-" + line for line in old),
                *("+" + line for line in new),
            ]
        else:
            diff = _unified(chunk.target, chunk.replacement, old_name, new_name)
        if not lines:
            lines.extend(diff[:2])
        lines.extend(_shift_hunks(diff[2:], (chunk.start_line or 1) - 1))
    return lines


def _cap(lines: Sequence[str], max_lines: int) -> list[str]:
    shown = [
        line if len(line) <= MAX_LINE_CHARS else line[: MAX_LINE_CHARS - 1] + "…"
        for line in lines[:max_lines]
    ]
    if len(lines) > max_lines:
        shown.append(f"… ({len(lines) - max_lines} more lines)")
    return shown


def edit_diff(
    name: str,
    arguments: Mapping[str, Any],
    *,
    old: str | None = None,
    baseline: Baseline | None = None,
    max_lines: int = MAX_DIFF_LINES,
) -> EditDiff:
    """An edit call (write_to_file, replace_file_content, multi_replace_file_content) as a diff.

    `old` is the file's text before this edit when an earlier edit of the turn left it; otherwise
    `baseline` says what HEAD holds. With neither, or when the old text does not contain what the
    call replaces, the diff is made from the call's arguments alone (hunks numbered from its
    `StartLine`) and one note line says why. Binary text and texts too large to diff are a note.
    """
    path = edit_target(arguments)
    old_name, shown = _header_names(path, baseline)
    known = old if old is not None else (baseline.text if baseline is not None else None)
    why = baseline.note if (old is None and baseline is not None and baseline.text is None) else ""
    if baseline is not None and baseline.binary and old is None:
        return EditDiff(("binary file: no diff shown",), None)
    if name == "write_to_file":
        new = _text(arguments.get("CodeContent"))
        overwrite = arguments.get("Overwrite")
        creates = overwrite is False or (isinstance(overwrite, str) and overwrite == "false")
        if known is None and creates:
            known = ""
        if _is_binary(new) or (known is not None and _is_binary(known)):
            return EditDiff(("binary file: no diff shown",), None)
        if known is None:
            lines = _unified("", new, old_name, shown)
            note = f"(the file's earlier text is unknown: {why or 'not looked up'})"
            return EditDiff((note, *_cap(lines, max_lines)), new)
        if _too_large(known) or _too_large(new):
            return EditDiff((f"{shown}: too large to diff ({len(new)} characters written)",), new)
        created = known == "" and old is None and not (baseline and baseline.tracked)
        lines = _unified(known, new, "/dev/null" if created else old_name, shown)
        if not lines:
            lines = ["(no change)"]
        return EditDiff(tuple(_cap(lines, max_lines)), new)
    chunks = _chunks(name, arguments)
    if not chunks:
        return EditDiff(("(no replacement chunks in the call)",), None)
    if any(_is_binary(c.target) or _is_binary(c.replacement) for c in chunks):
        return EditDiff(("binary file: no diff shown",), None)
    if known is not None and not _too_large(known):
        if _is_binary(known):
            return EditDiff(("binary file: no diff shown",), None)
        new_text = _apply(known, chunks)
        if new_text is not None and _too_large(new_text):
            why, new_text = "the file is too large to diff", None
        elif new_text is not None:
            lines = _unified(known, new_text, old_name, shown) or ["(no change)"]
            return EditDiff(tuple(_cap(lines, max_lines)), new_text)
        else:
            why = (
                "the earlier edit's text does not hold the replaced lines"
                if old is not None
                else "HEAD's text does not hold the replaced lines"
            )
    elif known is not None:
        why = "the file is too large to diff"
    note = f"(the edit alone: {why or 'the earlier text was not looked up'})"
    return EditDiff((note, *_cap(_snippet_lines(old_name, shown, chunks), max_lines)), None)


_DIFF_LINE = re.compile(r"[ +\-\\@]")


def looks_like_diff(text: str) -> bool:
    """True when a tool's output is a recorded diff (every line a unified-diff line, and at least
    one an addition or removal) rather than words such as `Created file …`."""
    lines = text.rstrip("\n").split("\n")
    changed = False
    for line in lines:
        if line and not _DIFF_LINE.match(line):
            return False
        changed = changed or line.startswith(("+", "-"))
    return changed


def render_recorded_diff(text: str, *, max_lines: int = MAX_DIFF_LINES) -> list[str]:
    """A diff the runtime recorded itself (code action), capped like ours."""
    return _cap(text.replace("\r\n", "\n").rstrip("\n").split("\n"), max_lines)


class EditLedger:
    """One turn's edits: each file's text after its latest edit, and each step's rendering.

    `render(index, name, arguments)` asks the baseline provider only for a file's first edit of
    the turn; later edits of that file start from the text the previous one left (or are shown
    alone when that is unknown). A step's rendering is computed once and then repeated, so
    re-fed snapshots never change what was already streamed.
    """

    def __init__(self, baselines: BaselineProvider | None = None) -> None:
        self._baselines = baselines
        # path -> text after the latest edit; None once an edit left it unknown.
        self._texts: dict[str, str | None] = {}
        self._rendered: dict[int, tuple[str, ...]] = {}
        # path -> what the provider said on the file's first edit (its name in diff headers).
        self._first: dict[str, Baseline | None] = {}

    def render(self, index: int, name: str, arguments: Mapping[str, Any]) -> tuple[str, ...]:
        done = self._rendered.get(index)
        if done is not None:
            return done
        path = edit_target(arguments)
        if path not in self._first:
            self._first[path] = self._baseline(path)
        baseline = self._first[path]
        previous = self._texts.get(path)
        if path in self._texts and previous is None:
            known_path = baseline.path if baseline is not None else ""
            baseline = Baseline(
                note="the text after an earlier edit is unknown", tracked=True, path=known_path
            )
        diff = edit_diff(name, arguments, old=previous, baseline=baseline)
        if path:
            self._texts[path] = diff.new_text
        self._rendered[index] = diff.lines
        return diff.lines

    def forget_text(self, path: str) -> None:
        """An edit whose result is unknown (a recorded diff, a failure): later ones start anew."""
        if path:
            self._texts[path] = None

    def _baseline(self, path: str) -> Baseline | None:
        if self._baselines is None or not path:
            return None
        try:
            return self._baselines(path)
        except Exception as exc:  # a provider is host code: its failure costs only the diff
            return Baseline.unknown(f"the old text could not be read ({exc})")


# -- the I/O edge: a file's text at HEAD ----------------------------------------------------------


# Variables that point git at another repository than the file's own (set inside git hooks, or
# by a user's shell): the file's folder alone must decide.
_GIT_LOCATORS = frozenset(
    {"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR",
     "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE"}
)  # fmt: skip


def _git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _GIT_LOCATORS}
    # English messages to classify; never a prompt for credentials; no index lock taken.
    env.update({"LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0"})
    return env


def _git(args: Sequence[str], cwd: str, timeout: float) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["git", "--no-pager", *args],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=timeout,
        env=_git_env(),
        check=False,
    )


def _existing_folder(path: str) -> str | None:
    folder = os.path.dirname(path)
    while folder and not os.path.isdir(folder):
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent
    return folder or None


def _first_line(data: bytes) -> str:
    text = data.decode("utf-8", "replace").strip()
    return text.splitlines()[0] if text else ""


def git_head_text(path: str, *, timeout: float = GIT_TIMEOUT) -> Baseline:
    """The text of `path` (absolute) at HEAD of the git repository holding it. Blocking.

    Never raises: a file outside a repository, not at HEAD (`tracked=False`, text ""), binary,
    too large, or a git that is missing, slow or failing comes back as a Baseline saying so.
    """
    if not os.path.isabs(path):
        return Baseline.unknown("a relative path")
    folder = _existing_folder(path)
    if folder is None:
        return Baseline.unknown("its folder does not exist")
    try:
        top = _git(["rev-parse", "--show-toplevel"], folder, timeout)
        if top.returncode != 0:
            said = _first_line(top.stderr)
            if "not a git repository" in said:
                return Baseline.unknown("outside a git repository")
            return Baseline.unknown(f"git: {said or 'rev-parse failed'}")
        root = top.stdout.decode("utf-8", "surrogateescape").strip()
        real = os.path.realpath(path)
        relative = os.path.relpath(real, os.path.realpath(root))
        if relative.startswith(".."):
            return Baseline.unknown("outside a git repository")
        relative = relative.replace(os.sep, "/")
        spec = f"HEAD:{relative}"
        size = _git(["cat-file", "-s", spec], root, timeout)
        if size.returncode != 0:
            # Not at HEAD: a new file, or a repository without commits yet.
            return Baseline(text="", tracked=False, path=relative, note="not at HEAD")
        if int(size.stdout.strip() or b"0") > MAX_BASELINE_BYTES:
            return Baseline.unknown("too large to diff")
        blob = _git(["cat-file", "blob", spec], root, timeout)
    except FileNotFoundError:
        return Baseline.unknown("git is not installed")
    except subprocess.TimeoutExpired:
        return Baseline.unknown(f"git took longer than {timeout:.0f}s")
    except (OSError, ValueError) as exc:
        return Baseline.unknown(f"git could not run: {exc}")
    if blob.returncode != 0:
        return Baseline.unknown(f"git: {_first_line(blob.stderr) or 'cat-file failed'}")
    data = blob.stdout
    if b"\x00" in data[:_BINARY_PROBE]:
        return Baseline(text=None, note="binary file", tracked=True, path=relative, binary=True)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return Baseline(text=None, note="binary file", tracked=True, path=relative, binary=True)
    return Baseline(text=text, tracked=True, path=relative)


class GitBaselines:
    """A baseline provider reading files' text at HEAD with git, each file once.

    Call it with a path to get a `Baseline`. With `blocking=False` (the live path) a path not
    loaded yet is answered "not looked up" at once and git runs only in `load`/`prefetch`, in a
    worker thread; with `blocking=True` (replay) a miss runs git there and then. Relative paths
    are taken from `cwd` (default: this process's folder, where agy works when given none).
    `reader` replaces `git_head_text` (tests, other version control).
    """

    def __init__(
        self,
        cwd: str | None = None,
        *,
        blocking: bool = False,
        reader: Callable[[str], Baseline] = git_head_text,
    ) -> None:
        if cwd is None:
            try:
                cwd = os.getcwd()  # agy works here too when no folder is given
            except OSError:
                cwd = None
        self._cwd = cwd
        self._blocking = blocking
        self._reader = reader
        self._cache: dict[str, Baseline] = {}

    def _absolute(self, path: str) -> str:
        if os.path.isabs(path) or not self._cwd:
            return path
        return os.path.join(self._cwd, path)

    def __call__(self, path: str) -> Baseline:
        key = self._absolute(path)
        known = self._cache.get(key)
        if known is not None:
            return known
        if not self._blocking:
            return Baseline.unknown("not looked up")
        return self._load_one(key)

    def _load_one(self, key: str) -> Baseline:
        baseline = self._reader(key)
        self._cache[key] = baseline
        return baseline

    def wanted(self, steps: Iterable[Any]) -> list[str]:
        """Paths edited by these (settled) tool steps whose baseline is not loaded yet."""
        paths: list[str] = []
        for step in steps:
            tool = getattr(step, "tool", None)
            status = getattr(step, "status", None)
            if tool is None or tool.name not in EDIT_TOOLS or not getattr(status, "terminal", 0):
                continue
            key = self._absolute(edit_target(tool.arguments))
            if key and key not in self._cache and key not in paths:
                paths.append(key)
        return paths

    def load(self, paths: Iterable[str]) -> None:
        """Read these paths' baselines now (blocking: call from a worker thread)."""
        for path in paths:
            key = self._absolute(path)
            if key not in self._cache:
                self._load_one(key)

    async def prefetch(self, steps: Iterable[Any]) -> None:
        """Load, in a worker thread, the baselines the assembler will ask for these steps."""
        paths = self.wanted(steps)
        if paths:
            from agy_provider.workers import off_loop  # the live path's pool, started already

            await off_loop(self.load, paths)
