"""No module of motor takes part in an import cycle, read from the code's own imports.

Modules that import each other can be neither read nor moved one at a time, and the circle breaks at import
time as soon as one of them needs a name of the other at module level. Every import counts: at the top, inside
a function, under TYPE_CHECKING. An import that has to close a circle says why in a comment on its line (or
the line above) starting `# import cycle:` (today: type-hint-only back references in the coordinator's dispatch
and HTTP transport, under TYPE_CHECKING).
"""

import ast
from collections.abc import Iterator
from pathlib import Path

import motor

PACKAGE = Path(motor.__file__).parent
CYCLE_COMMENT = "# import cycle:"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_names(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> Iterator[str]:
    """The dotted names an import statement may load: `from a import b` loads a, and a.b if b is a module."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        anchor = ".".join(package[: len(package) - node.level + 1])
        base = f"{anchor}.{base}" if base else anchor
    yield base
    yield from (f"{base}.{alias.name}" for alias in node.names)


def says_why(lines: list[str], node: ast.stmt) -> bool:
    """Whether the import carries a `# import cycle: <why>` comment on its lines or the line just above."""
    above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
    candidates = lines[node.lineno - 1 : node.end_lineno] + ([above] if above.startswith("#") else [])
    return any(line.partition(CYCLE_COMMENT)[2].strip() for line in candidates if CYCLE_COMMENT in line)


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """module -> the motor modules it imports, leaving out the imports that say why they close a cycle."""
    files = {module_name(path, root): path for path in sorted(root.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        source = path.read_text(encoding="utf-8")
        lines = source.splitlines()
        edges = graph.setdefault(module, set())
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.Import | ast.ImportFrom) or says_why(lines, node):
                continue
            for name in imported_names(node, module, path.name == "__init__.py"):
                if name in files and name != module:
                    edges.add(name)
    return graph


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for target in graph[todo.pop()] - seen:
            seen.add(target)
            todo.append(target)
    return seen


def cycle_edges(graph: dict[str, set[str]]) -> list[str]:
    """Every import a -> b with a reachable again from b: the edges that lie on a cycle."""
    reach = {module: reachable(graph, module) for module in graph}
    return sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets if a in reach[b])


def test_no_module_takes_part_in_an_import_cycle() -> None:
    assert cycle_edges(import_graph()) == []


def write_package(root: Path, files: dict[str, str]) -> Path:
    package = root / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, text in files.items():
        (package / name).write_text(text)
    return package


def test_the_check_sees_a_cycle_through_type_hints_and_function_bodies(tmp_path: Path) -> None:
    package = write_package(
        tmp_path,
        {
            "a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n",
            "b.py": "def load():\n    from . import a\n",
        },
    )
    assert cycle_edges(import_graph(package)) == ["pkg.a -> pkg.b", "pkg.b -> pkg.a"]


def test_an_import_that_says_why_does_not_count(tmp_path: Path) -> None:
    package = write_package(
        tmp_path,
        {
            "a.py": "import pkg.b\n",
            "b.py": "# import cycle: the plugin registers itself with its host\nfrom pkg import a\n",
            "c.py": "import pkg.d  # import cycle:\n",
            "d.py": "import pkg.c\n",
        },
    )
    assert cycle_edges(import_graph(package)) == ["pkg.c -> pkg.d", "pkg.d -> pkg.c"]
