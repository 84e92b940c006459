"""Log files of child processes: opened for a start (appended, or truncated, with a banner) and tailed."""

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

TAIL_WINDOW_BYTES = 64 * 1024  # a tail reads only this much of the end of the file


@dataclass(frozen=True)
class LogFile:
    """Where a child's stdout and stderr go."""

    path: Path
    truncate: bool = False  # else appended: one file keeps the output of every restart
    banner: str | None = None  # written (with a time stamp) before each start

    def open(self) -> BinaryIO:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = self.path.open("wb" if self.truncate else "ab")
        if self.banner is not None:
            handle.write(f"\n=== {self.banner} at {time.strftime('%Y-%m-%d %H:%M:%S')} ===\n".encode())
            handle.flush()
        return handle


def tail(path: Path, lines: int = 30, *, line_limit: int | None = None) -> str:
    """The last `lines` lines of `path` (each cut to `line_limit` characters), or a note saying why none."""
    try:
        with path.open("rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - TAIL_WINDOW_BYTES))
            text = handle.read().decode(errors="replace")
    except OSError as exc:
        return f"(log {path} unreadable: {exc})"
    kept = text.splitlines()[-lines:]
    if line_limit is not None:
        kept = [line[:line_limit] for line in kept]
    return "\n".join(kept) if kept else "(log is empty)"
