"""motor.runtime is the layer every runtime package may import, so it imports none of them."""

import ast
from pathlib import Path

import motor.runtime

ALLOWED = ("motor.runtime", "motor.protocol")


def test_runtime_imports_only_itself_and_protocol_from_motor() -> None:
    package = Path(motor.runtime.__file__).parent
    found = {}
    for module in sorted(package.glob("*.py")):
        for node in ast.walk(ast.parse(module.read_text())):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                if name.split(".")[0] == "motor" and not name.startswith(ALLOWED):
                    found.setdefault(module.name, []).append(name)
    assert found == {}
