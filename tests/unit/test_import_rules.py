"""The layering of docs/architecture.md, read from the code's own imports.

The runtime components (coordinator, controller, node manager, engine adapters) never import one another: they
talk through `motor.protocol` messages and share `motor.runtime`. `motor.config` and `motor.kv` are pure, and no
component reads user_config.json / env.json: only `motor.config` parses them, for the CLI and the deploy backends.
"""

import ast
from pathlib import Path

import pytest

import motor

PACKAGE = Path(motor.__file__).parent
# package -> the motor packages it may import (itself and the top-level `motor` module always)
ALLOWED: dict[str, set[str]] = {
    "config": {"kv"},
    "kv": set(),
    "protocol": {"config", "kv"},
    "runtime": {"protocol"},
    "kvstore": {"kv", "protocol", "runtime"},  # the Mooncake store client library
    "pool": {"kv", "protocol", "runtime"},  # the pool runtime: master launcher, the master's metrics
    "observability": {"config", "kv", "protocol", "runtime", "pool"},
    "coordinator": {"config", "kv", "protocol", "runtime"},
    "controller": {"config", "protocol", "runtime"},
    "node_manager": {"protocol", "runtime"},
    "engine": {"config", "kv", "protocol", "runtime", "kvstore"},
    "deploy": {"config", "kv", "protocol", "runtime", "pool", "observability"},
    "cli": {"config", "kv", "protocol", "runtime", "pool", "observability", "deploy", "engine"},
}
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
