"""The four packages import only the packages the house style lists for them, and no module imports itself back.

Besides its own modules, harness imports none of ours, db imports harness, evalsvc imports harness and db, and
the dashboard imports evalsvc and db (never harness: what it needs of a task or a secret it reads from evalsvc).
Inside evalsvc, its folders are layers: one may import those before it, never one after it.
Every import is read from the source with `ast`, wherever it stands (top of
the module, inside a function, under `if TYPE_CHECKING`): `import` and
`from ... import` (relative ones resolved), `importlib.import_module("...")`
and `__import__("...")` with a literal name. Importing `a.b.c` runs `a` and
`a.b` first, so it counts as importing those packages' `__init__` too, except
the packages the importing module is itself inside (they ran before it did;
importing one of them by name, `from a import x`, still counts). A dynamic
import whose name is not a literal cannot be checked and fails the test.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("harness", "db", "evalsvc", "dashboard")
# Which of our packages each package may import, besides its own modules (STYLE.md, "The four packages").
ALLOWED_IMPORTS: dict[str, tuple[str, ...]] = {
    "harness": (),
    "db": ("harness",),
    "evalsvc": ("harness", "db"),
    "dashboard": ("evalsvc", "db"),
}
# Inside evalsvc the same rule, one concept on top of the other: the pure statistics at the bottom, the command
# line at the top. Reading a report never loads the runner, and nothing but the CLI loads the CLI.
EVALSVC_LAYERS = tuple(f"evalsvc.{name}" for name in (
    "home", "statistics", "decision", "report", "run", "ladder", "engine", "doctor", "cli"))
_IMPORT_FUNCTIONS = {"import_module", "__import__"}


@dataclass(frozen=True)
class Arrow:
    """One module importing another, with where it says so."""

    source: str
    target: str
    line: int

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} (line {self.line})"


@dataclass(frozen=True)
class ImportGraph:
    """Every module of the packages, the arrows between them, and the imports that could not be read."""

    modules: frozenset[str]
    arrows: tuple[Arrow, ...]
    unreadable: tuple[str, ...]


def module_files(root: Path, packages: Sequence[str]) -> dict[str, Path]:
    """Module name -> file, for every .py file under the packages (a package is its `__init__`)."""
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def _with_parents(name: str) -> list[str]:
    """`a.b.c` -> [`a`, `a.b`, `a.b.c`]: what importing `a.b.c` runs."""
    parts = name.split(".")
    return [".".join(parts[:end]) for end in range(1, len(parts) + 1)]


def _package_of(module: str, is_package: bool) -> str:
    return module if is_package else module.rpartition(".")[0]


def _resolve(name: str, level: int, package: str) -> str:
    """An absolute module name for `from <level dots><name> import ...` written in `package`."""
    if level == 0:
        return name
    base = package.split(".")
    if level - 1 > len(base) - 1:
        raise ValueError(f"relative import beyond the top package: {'.' * level}{name} in {package}")
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, name] if name else base)


def _literal_call(node: ast.Call) -> tuple[str | None, str | None] | None:
    """(name, package) of an `importlib.import_module`/`__import__` call, None when it is another call;
    a name that is not a string literal comes back as None."""
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if called not in _IMPORT_FUNCTIONS:
        return None
    args = list(node.args)
    first = args[0] if args else next((k.value for k in node.keywords if k.arg == "name"), None)
    name = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None
    package = None
    if called == "import_module":
        second = args[1] if len(args) > 1 else next((k.value for k in node.keywords if k.arg == "package"), None)
        package = second.value if isinstance(second, ast.Constant) and isinstance(second.value, str) else None
    return name, package


def _imports_in(tree: ast.AST, module: str, is_package: bool, modules: frozenset[str]) -> Iterator[tuple[str, int]]:
    """(imported module, line) for every import in a module's syntax tree; None-named ones as '?'."""
    package = _package_of(module, is_package)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node.module or "", node.level, package)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                yield (submodule if submodule in modules else base), node.lineno
        elif isinstance(node, ast.Call) and (call := _literal_call(node)) is not None:
            name, call_package = call
            if name is None:
                yield "?", node.lineno
            elif name.startswith("."):
                level = len(name) - len(name.lstrip("."))
                yield _resolve(name.lstrip("."), level, call_package or "?"), node.lineno
            else:
                yield name, node.lineno


def import_graph(root: Path, packages: Sequence[str] = LAYERS) -> ImportGraph:
    """The arrows between the packages' modules (only those whose target is one of them)."""
    files = module_files(root, packages)
    modules = frozenset(files)
    arrows: list[Arrow] = []
    unreadable: list[str] = []
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for target, line in _imports_in(tree, module, path.name == "__init__.py", modules):
            if target == "?":
                unreadable.append(f"{module} (line {line}): import of a name that is not a literal")
                continue
            for imported in _with_parents(target):
                if imported in modules and imported != module and not _runs_already(imported, target, module):
                    arrows.append(Arrow(module, imported, line))
    return ImportGraph(modules, tuple(dict.fromkeys(arrows)), tuple(unreadable))


def _runs_already(imported: str, target: str, module: str) -> bool:
    """True for a package `__init__` that runs only because `target` is inside it, when `module` is inside it too:
    Python runs a module's own parent packages before the module itself, so that import adds nothing."""
    return imported != target and module.startswith(imported + ".")


def unlisted_arrows(graph: ImportGraph, allowed: dict[str, tuple[str, ...]] = ALLOWED_IMPORTS) -> list[Arrow]:
    """Arrows from a package in `allowed` into another of our packages that it does not list there."""

    def package(module: str) -> str:
        return module.partition(".")[0]

    return [arrow for arrow in graph.arrows
            if package(arrow.source) in allowed and package(arrow.target) != package(arrow.source)
            and package(arrow.target) not in allowed[package(arrow.source)]]


def backward_arrows(graph: ImportGraph, layers: Sequence[str] = LAYERS) -> list[Arrow]:
    """Arrows from a layer to one after it in `layers`; a layer is a package or module and everything inside it.
    Modules in no layer (the parent package of nested layers, say) are not judged."""
    rank = {layer: position for position, layer in enumerate(layers)}

    def layer_of(module: str) -> int | None:
        return next((rank[layer] for layer in layers if module == layer or module.startswith(layer + ".")), None)

    wrong = []
    for arrow in graph.arrows:
        source, target = layer_of(arrow.source), layer_of(arrow.target)
        if source is not None and target is not None and target > source:
            wrong.append(arrow)
    return wrong


def import_cycles(graph: ImportGraph) -> list[list[str]]:
    """One cycle path (first module repeated at the end) per strongly connected group of modules."""
    edges: dict[str, list[str]] = {m: [] for m in graph.modules}
    for arrow in graph.arrows:
        edges[arrow.source].append(arrow.target)
    return [_cycle_through(group, edges) for group in _strong_groups(edges) if len(group) > 1]


def _strong_groups(edges: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iteratively (no recursion limit to meet)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    groups.append(sorted(group))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(edges[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return groups


def _cycle_through(group: list[str], edges: dict[str, list[str]]) -> list[str]:
    """The shortest path from the group's first module back to itself, inside the group."""
    members = set(group)
    start = group[0]
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(edges[node]):
                if child not in members:
                    continue
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if child not in came_from:
                    came_from[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"no cycle inside the strongly connected group {group}")  # pragma: no cover


# ---------------------------------------------------------------- the project itself


@pytest.fixture(scope="module")
def project() -> ImportGraph:
    return import_graph(ROOT)


def test_every_package_is_read(project: ImportGraph) -> None:
    for package in LAYERS:
        assert package in project.modules
    assert len(project.modules) > 40 and len(project.arrows) > 100


def test_every_package_imports_only_the_packages_listed_for_it(project: ImportGraph) -> None:
    assert set(ALLOWED_IMPORTS) == set(LAYERS)
    wrong = unlisted_arrows(project)
    listed = "; ".join(f"{p} -> {', '.join(ps) or 'none of ours'}" for p, ps in ALLOWED_IMPORTS.items())
    assert not wrong, f"imports outside {listed}:\n" + "\n".join(map(str, wrong))


def test_evalsvc_folders_import_downwards_only(project: ImportGraph) -> None:
    assert all(layer in project.modules for layer in EVALSVC_LAYERS)
    wrong = backward_arrows(project, EVALSVC_LAYERS)
    order = " <- ".join(layer.removeprefix("evalsvc.") for layer in EVALSVC_LAYERS)
    assert not wrong, f"imports against {order} inside evalsvc:\n" + "\n".join(map(str, wrong))


def test_no_import_cycle(project: ImportGraph) -> None:
    cycles = import_cycles(project)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_every_dynamic_import_names_its_module(project: ImportGraph) -> None:
    assert not project.unreadable, "\n".join(project.unreadable)


# ---------------------------------------------------------------- the checks can fail


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for relative, source in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")
    return root


def test_a_backward_arrow_inside_a_function_is_caught(tmp_path: Path) -> None:
    root = write_tree(tmp_path, {
        "harness/__init__.py": "",
        "harness/client.py": "def late():\n    from db.models import Run\n    return Run\n",
        "db/__init__.py": "",
        "db/models.py": "from harness import client\n",
    })
    wrong = backward_arrows(import_graph(root, ("harness", "db")), ("harness", "db"))
    assert [str(a) for a in wrong] == ["harness.client -> db (line 2)", "harness.client -> db.models (line 2)"]


# Four packages importing just what they may: each test below adds or changes one file.
FOUR_PACKAGES = {
    "harness/__init__.py": "",
    "harness/tasks.py": "TASK_NAMES = ('gsm8k',)\n",
    "db/__init__.py": "",
    "db/engine.py": "from harness import tasks\n",
    "evalsvc/__init__.py": "",
    "evalsvc/run.py": "from harness.tasks import TASK_NAMES\nfrom db import engine\n",
    "dashboard/__init__.py": "",
    "dashboard/app.py": "from evalsvc.run import TASK_NAMES\nfrom db.engine import tasks\n",
}


def test_a_dashboard_import_of_harness_is_caught_though_harness_is_a_lower_layer(tmp_path: Path) -> None:
    root = write_tree(tmp_path, FOUR_PACKAGES)
    graph = import_graph(root, LAYERS)
    assert backward_arrows(graph) == [] and unlisted_arrows(graph) == []
    (root / "dashboard/views.py").write_text("import os\n\ndef form():\n    from harness.tasks import TASK_NAMES\n")
    graph = import_graph(root, LAYERS)
    assert backward_arrows(graph) == []  # harness comes before the dashboard: the order alone lets it through
    assert [str(a) for a in unlisted_arrows(graph)] == ["dashboard.views -> harness (line 4)",
                                                        "dashboard.views -> harness.tasks (line 4)"]


def test_an_import_of_a_later_package_is_unlisted_too(tmp_path: Path) -> None:
    root = write_tree(tmp_path, {
        **FOUR_PACKAGES,
        "harness/tasks.py": "import db.engine\n",
        "db/engine.py": "from evalsvc import tool_version\n",
        "evalsvc/__init__.py": "def tool_version():\n    from dashboard import app\n",
    })
    assert sorted(str(a) for a in unlisted_arrows(import_graph(root, LAYERS))) == [
        "db.engine -> evalsvc (line 1)", "evalsvc -> dashboard (line 2)", "evalsvc -> dashboard.app (line 2)",
        "harness.tasks -> db (line 1)", "harness.tasks -> db.engine (line 1)"]


def test_a_backward_arrow_between_nested_layers_is_caught(tmp_path: Path) -> None:
    root = write_tree(tmp_path, {
        "evalsvc/__init__.py": "",
        "evalsvc/statistics/__init__.py": "",
        "evalsvc/statistics/pairing.py": "import evalsvc.report.words\n",
        "evalsvc/report/__init__.py": "",
        "evalsvc/report/words.py": "from evalsvc.statistics import pairing\n",
    })
    layers = ("evalsvc.statistics", "evalsvc.report")
    wrong = backward_arrows(import_graph(root, ("evalsvc",)), layers)
    assert [str(a) for a in wrong] == ["evalsvc.statistics.pairing -> evalsvc.report (line 1)",
                                       "evalsvc.statistics.pairing -> evalsvc.report.words (line 1)"]


def test_a_relative_import_is_resolved_before_it_is_judged(tmp_path: Path) -> None:
    root = write_tree(tmp_path, {
        "evalsvc/__init__.py": "",
        "evalsvc/run/__init__.py": "",
        "evalsvc/run/runner.py": "from ..report import tables\n",
        "evalsvc/report/__init__.py": "",
        "evalsvc/report/tables.py": "from . import words\n",
        "evalsvc/report/words.py": "def late():\n    from ..run.runner import x\n",
    })
    cycles = import_cycles(import_graph(root, ("evalsvc",)))
    assert cycles == [["evalsvc.report.tables", "evalsvc.report.words", "evalsvc.run.runner", "evalsvc.report.tables"]]


def test_a_module_reaching_its_own_package_by_name_is_an_arrow(tmp_path: Path) -> None:
    root = write_tree(tmp_path, {
        "harness/__init__.py": "",
        "harness/tasks/__init__.py": "def get_task():\n    from harness.tasks.gsm8k import GSM8K\n",
        "harness/tasks/base.py": "",
        "harness/tasks/gsm8k.py": "from harness.tasks.base import x\nGSM8K = 1\n",
    })
    assert import_cycles(import_graph(root, ("harness",))) == []  # the parent ran before gsm8k: no new import
    (root / "harness/tasks/gsm8k.py").write_text("from harness.tasks import get_task\nGSM8K = 1\n")
    assert import_cycles(import_graph(root, ("harness",))) == [["harness.tasks", "harness.tasks.gsm8k", "harness.tasks"]]


def test_a_cycle_through_a_package_init_is_caught_with_its_path(tmp_path: Path) -> None:
    root = write_tree(tmp_path, {
        "evalsvc/__init__.py": "",
        "evalsvc/ladder/__init__.py": "from .launch import start\n",
        "evalsvc/ladder/launch.py": "def start():\n    pass\n",
        "evalsvc/report.py": "from evalsvc.ladder.file import X\n",  # runs evalsvc/ladder/__init__ first
        "evalsvc/ladder/file.py": "X = 1\n",
    })
    graph = import_graph(root, ("evalsvc",))
    assert import_cycles(graph) == []
    (root / "evalsvc/ladder/launch.py").write_text("from evalsvc import report\n")
    cycles = import_cycles(import_graph(root, ("evalsvc",)))
    assert cycles == [["evalsvc.ladder", "evalsvc.ladder.launch", "evalsvc.report", "evalsvc.ladder"]]


def test_a_cycle_through_importlib_is_caught(tmp_path: Path) -> None:
    root = write_tree(tmp_path, {
        "evalsvc/__init__.py": "",
        "evalsvc/cli.py": "import importlib\nCOMMANDS = [importlib.import_module('evalsvc.runs')]\n",
        "evalsvc/runs.py": "def command():\n    from evalsvc.cli import COMMANDS\n    return COMMANDS\n",
        "evalsvc/other.py": "m = __import__('evalsvc.deep', fromlist=['x'])\n",
        "evalsvc/deep.py": "from importlib import import_module\nimport_module('.other', package='evalsvc')\n",
    })
    cycles = import_cycles(import_graph(root, ("evalsvc",)))
    assert sorted(cycles) == [["evalsvc.cli", "evalsvc.runs", "evalsvc.cli"],
                              ["evalsvc.deep", "evalsvc.other", "evalsvc.deep"]]


def test_a_dynamic_import_of_a_computed_name_is_reported(tmp_path: Path) -> None:
    root = write_tree(tmp_path, {
        "evalsvc/__init__.py": "",
        "evalsvc/cli.py": "import importlib\nfor name in ('a', 'b'):\n    importlib.import_module(name)\n",
    })
    assert import_graph(root, ("evalsvc",)).unreadable == ("evalsvc.cli (line 3): import of a name that is not a literal",)
