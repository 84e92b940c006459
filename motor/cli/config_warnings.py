"""The config's warnings as `motor validate` and `motor deploy` print them: sibling keys that share one warning
are named together (`section.{a, b, c}: why`), so a pyMotor config that sets a whole section motor does not
implement reads as one line per section, every key still named."""

from itertools import groupby


def grouped(warnings: list[str]) -> list[str]:
    """`warnings` ("json.path: message") with consecutive siblings of the same message joined."""
    lines: list[str] = []
    for (parent, message), run in groupby(warnings, key=_parent_and_message):
        keys = [_key(warning) for warning in run]
        if parent is None or len(keys) == 1:
            lines.extend(f"{(parent + '.') if parent else ''}{key}: {message}" for key in keys)
        else:
            lines.append(f"{parent}.{{{', '.join(keys)}}}: {message}")
    return lines


def _parent_and_message(warning: str) -> tuple[str | None, str]:
    path, _, message = warning.partition(": ")
    parent, dot, _ = path.rpartition(".")
    return (parent if dot else None), message


def _key(warning: str) -> str:
    return warning.partition(": ")[0].rpartition(".")[2]
