"""The layering of docs/architecture.md, read from the code's own imports.

The rule is the "may import" column of the package table on that page (under "## Packages"): each package may
import the packages its row names, itself and the top-level `motor` module. The runtime components (coordinator,
controller, node manager, engine adapters) never import one another: they talk through `motor.protocol` messages
and share `motor.runtime`. `motor.config` and `motor.kv` are pure, and no component reads user_config.json /
env.json: only `motor.config` parses them, for the CLI and the deploy backends.
"""

import ast
import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

import motor

PACKAGE = Path(motor.__file__).parent
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"
LAYER_HEADING = "Packages"
TRAILING_NOTE = re.compile(r"\s*\([^)]*\)\s*$")  # "kv (pure)": the note says why, the names are the rule


def package_name(cell: str) -> str:
    """A package as the table names it (`` `motor.config` `` or `config`) -> its directory name (`config`)."""
    return cell.strip().strip("`").removeprefix("motor.")


def allowed_imports(cell: str) -> set[str]:
    """A "may import" cell: package names separated by commas, or "nothing", and an optional note in brackets."""
    names = TRAILING_NOTE.sub("", cell).strip()
    return set() if names == "nothing" else {package_name(name) for name in names.split(",")}


def layer_table(markdown: str) -> dict[str, set[str]]:
    """package -> the motor packages it may import, from the first table under the `## Packages` heading."""
    tokens = MarkdownIt("commonmark").enable("table").parse(markdown)
    heading = next(
        i
        for i, token in enumerate(tokens)
        if token.type == "heading_open" and token.tag == "h2" and tokens[i + 1].content == LAYER_HEADING
    )
    rows: list[list[str]] = []
    for token in tokens[heading:]:
        if token.type == "tr_open":
            rows.append([])
        elif token.type == "inline" and rows:
            rows[-1].append(token.content)
        elif token.type == "table_close":
            break
    header, *body = rows
    package, may_import = header.index("package"), header.index("may import")
    return {package_name(row[package]): allowed_imports(row[may_import]) for row in body}


ALLOWED = layer_table(ARCHITECTURE.read_text(encoding="utf-8"))
CONFIG_READERS = ("motor.config.loader", "motor.config.load_config", "motor.config.load_documents")
MAY_READ_CONFIG = {"config", "deploy", "cli"}


def imports_by_package(root: Path = PACKAGE) -> dict[str, list[tuple[str, str]]]:
    """package -> [(module file, imported motor module)]"""
    found: dict[str, list[tuple[str, str]]] = {}
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if len(relative.parts) < 2:
            continue
        package = relative.parts[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            found.setdefault(package, []).extend(
                (str(relative), name) for name in names if name.split(".")[0] == "motor"
            )
    return found


def test_every_package_has_a_rule() -> None:
    packages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages == set(ALLOWED)
    assert {name for names in ALLOWED.values() for name in names} <= packages


def test_the_table_reads_names_notes_and_nothing() -> None:
    table = """## Packages

| package | owns | may import |
|---|---|---|
| `motor.kv` | pure parts | nothing (pure) |
| `motor.protocol` | messages | config, `motor.kv` (their models) |
"""
    assert layer_table(table) == {"kv": set(), "protocol": {"config", "kv"}}


def forbidden_imports(package: str, root: Path = PACKAGE) -> list[str]:
    allowed = ALLOWED[package] | {package, "__version__"}
    return sorted(
        f"{module} imports {name}"
        for module, name in imports_by_package(root).get(package, [])
        if "." in name and name.split(".")[1] not in allowed
    )


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_what_its_layer_allows(package: str) -> None:
    assert forbidden_imports(package) == []


@pytest.mark.parametrize("package", sorted(set(ALLOWED) - MAY_READ_CONFIG))
def test_components_never_read_the_config_files(package: str) -> None:
    readers = sorted(
        f"{module} imports {name}"
        for module, name in imports_by_package().get(package, [])
        if name.startswith(CONFIG_READERS)
    )
    assert readers == []


def test_the_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    module = tmp_path / "coordinator" / "core.py"
    module.parent.mkdir()
    module.write_text(
        "import json\nfrom motor.protocol import specs\nfrom motor.controller.registry import X\n"
    )
    assert forbidden_imports("coordinator", tmp_path) == [
        "coordinator/core.py imports motor.controller.registry",
        "coordinator/core.py imports motor.controller.registry.X",
    ]
