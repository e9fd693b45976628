"""The house's layout holds: each module imports only from its own floor or below, and no module or
function outgrows what a reader can hold (issue 17's sizes). Read from the source, nothing run."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "agy_provider"

# The floors of agy_provider/, lowest first (ARCHITECTURE.md, "Module map"). A module may import
# from its own floor and any floor below; the root holds the modules directly in agy_provider/.
FLOORS = ["", "wire", "pi", "agy", "assembly", "rpc", "store", "contract", "bridge", "live", "offline",
          "hosts", "cli"]  # fmt: skip
# Exceptions, each a decision: offline/ reads saved conversations and never needs a live turn;
# the simulator stands in for agy and must not depend on the provider it is used to test.
MAY_NOT_IMPORT = {"offline": {"live"}}
SIM_MAY_IMPORT = {"", "wire", "agy", "sim"}
# The package root re-exports lazily, and two root modules are the documented import paths of
# hosts/ (agy_provider.sync, agy_provider.ask): they may name any floor.
RE_EXPORTS = {"__init__", "sync", "ask"}

MAX_MODULE_LINES = 600
MAX_SIM_MODULE_LINES = 700
MAX_FUNCTION_LINES = 100
MAX_DRIVER_LINES = 450
MAX_ROOT_MODULES = 12


def product_files() -> list[Path]:
    return sorted([*PACKAGE.rglob("*.py"), *(ROOT / "plugins").glob("*.py")])


def floor_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else ""


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imported_floors(path: Path) -> set[tuple[str, int]]:
    """(floor, line) of every agy_provider import, lazy ones included, typing-only ones not."""
    found: set[tuple[str, int]] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking_only(child):
                for other in child.orelse:
                    visit(other)
                continue
            names: list[str] = []
            line = getattr(child, "lineno", 0)
            if isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                names = [child.module]
                if child.module == "agy_provider":
                    names = [f"agy_provider.{alias.name}" for alias in child.names]
            elif isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            for name in names:
                parts = name.split(".")
                if parts[0] != "agy_provider" or len(parts) < 2 or parts[1] == "plugins":
                    continue
                floor = parts[1] if (PACKAGE / parts[1]).is_dir() else ""
                found.add((floor, line))
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def layering_violations() -> list[str]:
    wrong = []
    for path in PACKAGE.rglob("*.py"):
        floor = floor_of(path)
        if floor == "" and path.stem in RE_EXPORTS:
            continue
        for target, line in imported_floors(path):
            if floor == "sim":
                allowed = target in SIM_MAY_IMPORT
            elif target == "sim":
                allowed = False  # the product never needs the simulator (agy/state_folder.py)
            else:
                allowed = FLOORS.index(target) <= FLOORS.index(floor) and target not in (
                    MAY_NOT_IMPORT.get(floor, set())
                )
            if not allowed:
                rel = path.relative_to(ROOT)
                wrong.append(f"{rel}:{line} imports {target or 'the root'}/")
    return sorted(wrong)


def test_each_module_imports_only_its_own_floor_or_below() -> None:
    assert layering_violations() == []


def test_the_floors_named_here_are_the_folders_there() -> None:
    folders = {
        p.name
        for p in PACKAGE.iterdir()
        if p.is_dir() and not p.is_symlink() and (p / "__init__.py").exists()
    }
    assert folders == {*FLOORS[1:], "sim"}


def test_at_most_twelve_modules_sit_directly_in_the_package() -> None:
    assert len(list(PACKAGE.glob("*.py"))) <= MAX_ROOT_MODULES


def test_no_module_outgrows_its_limit() -> None:
    over = []
    for path in product_files():
        limit = MAX_SIM_MODULE_LINES if floor_of_any(path) == "sim" else MAX_MODULE_LINES
        lines = path.read_text(encoding="utf-8").count("\n")
        if lines > limit:
            over.append(f"{path.relative_to(ROOT)}: {lines} lines (limit {limit})")
    assert over == []


def floor_of_any(path: Path) -> str:
    return floor_of(path) if path.is_relative_to(PACKAGE) else "plugins"


def test_no_function_is_over_a_hundred_lines() -> None:
    over = []
    for path in product_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    over.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {lines}")
    assert over == []


def test_the_turn_driver_stays_a_conductor() -> None:
    tree = ast.parse((PACKAGE / "live" / "turn.py").read_text(encoding="utf-8"))
    driver = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TurnDriver")
    assert (driver.end_lineno or 0) - driver.lineno + 1 < MAX_DRIVER_LINES


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from agy_provider.live.turn import TurnDriver\n", {("live", 1)}),
        ("from agy_provider import workers\n", {("", 1)}),
        ("def f():\n    import agy_provider.sim.state\n", {("sim", 2)}),
        ("if TYPE_CHECKING:\n    from agy_provider.cli import main\n", set()),
        ("from agy_provider.plugins import defaults\n", set()),
    ],
)
def test_the_import_reader_sees_what_it_must(
    tmp_path: Path, source: str, expected: set[tuple[str, int]]
) -> None:
    module = tmp_path / "probe.py"
    module.write_text(source, encoding="utf-8")
    assert imported_floors(module) == expected


def test_the_module_map_names_every_module() -> None:
    # ARCHITECTURE.md is the map a newcomer reads first: a module it does not name is lost.
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    map_ = text[text.index("## Module map") : text.index("### stream-json coverage")]
    unnamed = [
        str(path.relative_to(ROOT))
        for path in product_files()
        if path.name not in ("__init__.py", "__main__.py") and f"{path.name}" not in map_
    ]
    assert unnamed == []
