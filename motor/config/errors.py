"""Configuration problems: each names the JSON path and says how to fix it."""

from dataclasses import dataclass


@dataclass(frozen=True)
class ConfigIssue:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class ConfigError(Exception):
    """One or more configuration problems, all collected before raising."""

    def __init__(self, issues: list[ConfigIssue]) -> None:
        super().__init__("\n".join(str(issue) for issue in issues))
        self.issues = issues


def json_path(location: tuple[object, ...]) -> str:
    """('a', 'b', 3, 'c') -> 'a.b[3].c'; pydantic's '[key]' marker of a refused dict key is dropped (the path
    then ends on the key itself)."""
    path = ""
    for part in location:
        if part == "[key]":
            continue
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path
