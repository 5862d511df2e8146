"""The plan of the house holds: every import points down a floor, no module imports itself round a
circle, an import put off into a function says why, and the concepts page names files that exist.

The floors are declared once, in the table of ``docs/development.md`` ("The house"), which this
test reads; the import graph is built from the source with :mod:`ast`, so an import inside a
function or under ``TYPE_CHECKING`` is an arrow as much as one at the top of a module: each is a
dependency the code has, whenever it is paid.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "sluice"
DEVELOPMENT = REPO / "docs" / "development.md"
CONCEPTS = REPO / "docs" / "guide" / "concepts.md"
CORE = "sluice"  # the floor table's name for the modules directly in sluice/


@dataclass(frozen=True)
class Import:
    """One imported Sluice module: where (module, line) and whether inside a function body."""

    source: str
    target: str
    line: int
    in_function: bool


@dataclass(frozen=True)
class Plan:
    """The floors table: package -> floor number, and the same-floor arrows it allows."""

    floors: dict[str, int]
    same_floor: frozenset[tuple[str, str]]


def _table(markdown: str, marker: str) -> list[list[str]]:
    """The rows (cells) of the markdown table that follows the ``<!-- marker ... -->`` comment."""
    start = markdown.index(f"<!-- {marker}")
    rows = []
    for line in markdown[start:].splitlines()[1:]:
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not set(cells[0]) <= set("-: "):
            rows.append(cells)
    return rows[1:]  # the header


def _names(cell: str) -> list[str]:
    return re.findall(r"`([\w.]+)`", cell)


def read_plan(markdown: str) -> Plan:
    floors: dict[str, int] = {}
    for floor, packages, _role in _table(markdown, "floors"):
        for package in _names(packages):
            assert package not in floors, f"{package} is on two floors of the table"
            floors[package] = int(floor)
    same = frozenset((_names(a)[0], _names(b)[0]) for a, b, _why in _table(markdown, "same-floor"))
    return Plan(floors, same)


def module_names() -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its own name)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> Iterator[Import]:
    """The Sluice modules ``name`` imports: ``from a import b`` is ``a.b`` when that is a module."""
    is_package = path.name == "__init__.py"

    def targets(node: ast.Import | ast.ImportFrom) -> list[str]:
        if isinstance(node, ast.Import):
            return [alias.name for alias in node.names]
        if node.level:
            base = name.split(".")[: len(name.split(".")) - node.level + is_package]
            module = ".".join(base + ([node.module] if node.module else []))
        else:
            module = node.module or ""
        return [f"{module}.{a.name}" if f"{module}.{a.name}" in modules else module for a in node.names]

    def walk(node: ast.AST, in_function: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for target in targets(child):
                    while target and target not in modules:  # an attribute of a module
                        target = target.rpartition(".")[0]
                    if target and target != name:
                        yield Import(name, target, child.lineno, in_function)
            yield from walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    yield from walk(ast.parse(path.read_text(), str(path)), False)


def import_graph() -> list[Import]:
    modules = module_names()
    return [imp for name, path in modules.items() for imp in _imports(name, path, modules)]


def package_of(module: str, plan: Plan) -> str:
    """The floor table's package holding ``module``: the longest listed prefix.  A module directly
    in sluice/ is core; one in a subpackage the table does not list is an error, not core."""
    listed = [p for p in plan.floors if p != CORE and (module == p or module.startswith(p + "."))]
    if listed:
        return max(listed, key=len)
    assert module.count(".") == 1 or module == CORE, (
        f"{module} is in no package of the floors table in docs/development.md: add its package to a floor"
    )
    return CORE


def wrong_way(graph: list[Import], plan: Plan) -> list[str]:
    """Each import that points up a floor, or across one without the table's leave."""
    wrong: list[str] = []
    for imp in graph:
        a, b = package_of(imp.source, plan), package_of(imp.target, plan)
        if a == b or plan.floors[a] > plan.floors[b] or (a, b) in plan.same_floor:
            continue
        where = "up" if plan.floors[a] < plan.floors[b] else "across"
        wrong.append(
            f"{imp.source}:{imp.line} imports {imp.target}: {where} from floor {plan.floors[a]} ({a}) "
            f"to floor {plan.floors[b]} ({b})"
        )
    return list(dict.fromkeys(wrong))  # one line per import statement, however many names it takes


def circles(graph: list[Import]) -> list[list[str]]:
    """The strongly connected parts of the module graph with more than one module (Tarjan)."""
    edges: dict[str, set[str]] = {}
    for imp in graph:
        edges.setdefault(imp.source, set()).add(imp.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def function_imports(path: Path) -> Iterator[tuple[int, bool]]:
    """Each import statement inside a function body: its line, and whether a comment explains it.

    The comment may be on the statement's lines or on the line above it; consecutive imports share
    one comment (a group put off together for one reason).
    """
    source = path.read_text()
    comments = {
        tok.start[0] for tok in tokenize.generate_tokens(io.StringIO(source).readline) if tok.type == tokenize.COMMENT
    }
    for func in ast.walk(ast.parse(source)):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for body in _blocks(func):
            group: list[ast.stmt] = []
            for stmt in [*body, None]:
                if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                    group.append(stmt)
                    continue
                if group:
                    lines = set(range(group[0].lineno - 1, group[-1].end_lineno + 1))
                    for imp in group:
                        yield imp.lineno, bool(lines & comments)
                group = []


def _blocks(func: ast.AST) -> Iterator[list[ast.stmt]]:
    """The statement lists of a function, nested blocks included, but not those of inner functions
    (``ast.walk`` reaches them as functions of their own)."""
    todo = [func]
    while todo:
        node = todo.pop()
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                yield block
            for child in block or ():
                if isinstance(child, ast.AST) and not isinstance(
                    child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
                ):
                    todo.append(child)


def test_every_module_is_on_a_floor_and_every_listed_package_exists() -> None:
    plan = read_plan(DEVELOPMENT.read_text())
    modules = module_names()
    for module in modules:
        package_of(module, plan)
    assert [p for p in plan.floors if p not in modules] == []
    assert [pair for pair in plan.same_floor if plan.floors[pair[0]] != plan.floors[pair[1]]] == []


@pytest.mark.slow
def test_every_import_points_down_a_floor() -> None:
    assert wrong_way(import_graph(), read_plan(DEVELOPMENT.read_text())) == []


def test_an_upward_import_is_caught() -> None:
    """The check itself: the tracker's wire importing the server is refused, the other way is not."""
    plan = read_plan(DEVELOPMENT.read_text())
    up = Import("sluice.tracker.wire.protocol", "sluice.tracker.server.server", 1, True)
    down = Import("sluice.tracker.server.server", "sluice.tracker.wire.protocol", 1, False)
    across = Import("sluice.receiver.worker", "sluice.spark_driver.driver", 1, False)
    assert [w.split(": ")[1] for w in wrong_way([up, down, across], plan)] == [
        "up from floor 4 (sluice.tracker.wire) to floor 7 (sluice.tracker.server)",
        "across from floor 7 (sluice.receiver) to floor 7 (sluice.spark_driver)",
    ]


@pytest.mark.slow
def test_no_module_imports_itself_round_a_circle() -> None:
    assert circles(import_graph()) == []


def test_a_circle_is_found() -> None:
    loop = [
        Import("a", "b", 1, False),
        Import("b", "c", 1, True),
        Import("c", "a", 1, False),
        Import("c", "d", 1, False),
    ]
    assert circles(loop) == [["a", "b", "c"]]


@pytest.mark.slow
def test_an_import_inside_a_function_says_why() -> None:
    unexplained = [
        f"{path.relative_to(REPO)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line, explained in function_imports(path)
        if not explained
    ]
    assert unexplained == [], "say on the line or the one above why the import waits for the call"


def test_the_comment_check_reads_groups_and_nesting(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "def f():\n"
        "    import json  # cheap, but kept off the path\n"
        "    import csv\n"
        "    x = 1\n"
        "    if x:\n"
        "        import ast\n"
        "    # pyarrow is optional\n"
        "    import zlib\n"
    )
    assert list(function_imports(module)) == [(2, True), (3, True), (8, True), (6, False)]


def concept_paths(markdown: str) -> list[str]:
    """The paths in the Sluice column of the concepts page's Spark-class table."""
    start = markdown.index("| Spark | Sluice |")
    rows = markdown[start:].split("\n\n")[0].splitlines()[2:]
    return [path for row in rows for path in re.findall(r"`(sluice/[^`]+)`", row.split("|")[2])]


def test_each_spark_concept_names_files_that_exist() -> None:
    paths = concept_paths(CONCEPTS.read_text())
    assert len(paths) > 20
    assert [p for p in paths if not (REPO / p).is_file()] == [], "a Spark concept names one file at one path"
