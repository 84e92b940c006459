"""The planner's journal, `<run_dir>/changes.jsonl`: one JSON line per change it starts, per step, and per
outcome. A restarted planner reads it back: the changes of the last minute (so cooldown and the changes per
minute hold across the restart) and a change it was carrying out when it stopped, which it reports; it then
decides afresh from the counts the job runs, which finishes that change or replaces it."""

import json
import logging
import time
from pathlib import Path
from typing import Any

from motor.protocol.planner import DecisionView

log = logging.getLogger(__name__)

JOURNAL_FILE = "changes.jsonl"
KEEP_BYTES = 1 << 20  # rewritten to its newer half beyond this
MINUTE_S = 60.0


class Journal:
    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / JOURNAL_FILE

    def write(self, event: str, **fields: Any) -> None:
        entry = {"at": time.time(), "event": event, **fields}
        try:
            with self.path.open("a+b") as handle:
                if handle.tell() > 0:
                    handle.seek(-1, 2)
                    if handle.read(1) != b"\n":  # a line a killed planner left unfinished
                        handle.write(b"\n")
                handle.write(json.dumps(entry).encode() + b"\n")
            if self.path.stat().st_size > KEEP_BYTES:
                lines = self.path.read_text(encoding="utf-8").splitlines(keepends=True)
                self.path.write_text("".join(lines[len(lines) // 2 :]), encoding="utf-8")
        except OSError as exc:
            log.warning("cannot write the journal %s: %s", self.path, exc)

    def entries(self) -> list[dict[str, Any]]:
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except OSError:
            return []
        entries = []
        for line in lines:
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a line cut short when the planner was killed
            if isinstance(entry, dict) and isinstance(entry.get("at"), int | float):
                entries.append(entry)
        return entries


def recent_changes(entries: list[dict[str, Any]], now: float) -> tuple[float, ...]:
    """When the changes of the last minute started (epoch seconds, oldest first)."""
    return tuple(e["at"] for e in entries if e.get("event") == "change" and now - e["at"] < MINUTE_S)


def interrupted(entries: list[dict[str, Any]]) -> str | None:
    """The change the journal started and never finished (its last start without an outcome after it)."""
    for entry in reversed(entries):
        if entry.get("event") in ("done", "failed"):
            return None
        if entry.get("event") == "change":
            return f"to {_counts(entry.get('targets'))} (from {_counts(entry.get('from'))}), started at {entry['at']:.0f}"
    return None


def changes(entries: list[dict[str, Any]]) -> list[DecisionView]:
    """The changes the journal started, the latest first."""
    return [
        DecisionView(
            at=e["at"],
            kind=e.get("kind", "scale"),
            targets=e.get("targets") or {},
            reason=e.get("reason", ""),
        )
        for e in reversed(entries)
        if e.get("event") == "change"
    ]


def _counts(counts: Any) -> str:
    if not isinstance(counts, dict):
        return "?"
    return f"{counts.get('prefill', '?')}P+{counts.get('decode', '?')}D"
