"""How the node manager starts its engine server: in its own process group, dying with the node manager,
recorded in `engine.pid` so that whoever deployed the node manager can find an engine that outlived it."""

import logging
from dataclasses import dataclass
from pathlib import Path

from motor.protocol.credentials import redacted_argv
from motor.protocol.node_manager import EngineProcessRecord
from motor.runtime.logs import LogFile
from motor.runtime.processes import Child, spawn

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineCommand:
    argv: list[str]
    env: dict[str, str]  # the engine's whole environment (motor.node_manager.engine_env)
    files: dict[str, str]  # written before every start
    log_path: Path
    pid_path: Path  # an EngineProcessRecord of the running engine


def start_engine(command: EngineCommand) -> Child:
    for path, text in command.files.items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text, encoding="utf-8")
    child = spawn(
        command.argv,
        env=dict(command.env),
        log=LogFile(command.log_path, banner="engine starting"),
        die_with_parent=True,
    )
    record = EngineProcessRecord(pid=child.pid, start_ticks=child.identity.start_ticks)
    command.pid_path.write_text(record.model_dump_json(), encoding="utf-8")
    log.info("engine started, pid %d: %s", child.pid, " ".join(redacted_argv(command.argv)))
    return child
