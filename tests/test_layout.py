"""The house's layout holds: each module imports only from its own floor or below, no modules
import each other in a circle (imports only for typing count too), and no module or function
outgrows what a reader can hold (issue 17's sizes). Read from the source, nothing run."""

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
# Root modules that stand on a floor above the root: the hooks are typed against the contract,
# and the plugin manager keeps what plugins register in the contract's types.
ROOT_MODULE_FLOORS = {"hookspecs": "contract", "plugin_manager": "contract"}

MAX_MODULE_LINES = 600
MAX_SIM_MODULE_LINES = 700
MAX_FUNCTION_LINES = 100
MAX_DRIVER_LINES = 450
MAX_ROOT_MODULES = 12


def product_files() -> list[Path]:
    return sorted([*PACKAGE.rglob("*.py"), *(ROOT / "plugins").glob("*.py")])


def floor_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else ROOT_MODULE_FLOORS.get(path.stem, "")


def imported_names(path: Path) -> set[tuple[str, int]]:
    """(module, line) of every agy_provider import: lazy ones and those only for typing included
    (`from package import name` names `package.name`, the submodule when it is one)."""
    found: set[tuple[str, int]] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                found.add((f"{node.module}.{alias.name}", node.lineno))
        elif isinstance(node, ast.Import):
            found.update((alias.name, node.lineno) for alias in node.names)
    return {(n, line) for n, line in found if n.startswith("agy_provider.")}


def imported_floors(path: Path) -> set[tuple[str, int]]:
    """(floor, line) of every agy_provider import, lazy ones and those only for typing included."""
    found: set[tuple[str, int]] = set()
    for name, line in imported_names(path):
        top = name.split(".")[1]
        if top == "plugins":
            continue
        found.add((top if (PACKAGE / top).is_dir() else ROOT_MODULE_FLOORS.get(top, ""), line))
    return found


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT / "plugins" if path.is_relative_to(ROOT / "plugins") else PACKAGE)
    parts = list(rel.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    prefix = (
        ["agy_provider", "plugins"] if path.is_relative_to(ROOT / "plugins") else ["agy_provider"]
    )
    return ".".join([*prefix, *parts])


def import_graph() -> dict[str, set[str]]:
    """Each product module → the product modules it imports (a name inside a module counts as
    that module; a package's `__init__` only when it is named itself)."""
    modules = {module_name(path): path for path in product_files()}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for imported, _ in imported_names(path):
            while imported not in modules and "." in imported:
                imported = imported.rpartition(".")[0]
            if imported in modules and imported != name:
                targets.add(imported)
        graph[name] = targets
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other in a loop (Tarjan's strongly connected
    components of more than one module), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph.get(module, ())):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


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


def test_no_modules_import_each_other_in_a_circle() -> None:
    # Imports only for typing count: a circle of them is still a design where nothing comes first.
    assert circles(import_graph()) == []


def test_the_circle_finder_sees_a_loop_and_only_a_loop() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


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
        ("if TYPE_CHECKING:\n    from agy_provider.cli import main\n", {("cli", 2)}),
        ("from agy_provider.hookspecs import hookimpl\n", {("contract", 1)}),
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


def test_every_folder_of_the_package_is_installed() -> None:
    # pyproject.toml lists the packages a wheel holds: a folder left out imports in a checkout and
    # fails on a plain install (`tests/test_plain_install.py` finds it late, in one path).
    import tomllib

    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    folders = {
        ".".join(("agy_provider", *path.parent.relative_to(PACKAGE).parts))
        for path in PACKAGE.rglob("__init__.py")
    }
    assert folders - listed == set()
