"""Engine command lines checked by the engines' own argument parsers before anything starts (`motor validate`,
local `motor deploy`): a key of `engine_config` the engine does not take is a config problem with its JSON path,
not an engine that exits at start while the deploy waits. One `python -m motor.engine.argcheck` per engine type
checks the command of every role at once; an engine that is not installed here is not checked (a note says so).
"""

import json
import re
import subprocess
import sys
from dataclasses import dataclass

from motor.config import ConfigIssue, Topology
from motor.deploy.engines.options import option_name
from motor.deploy.plan import Plan
from motor.engine.argcheck import NOT_INSTALLED, PARSERS, RESULT

CHECK_TIMEOUT_S = 120.0
FLAG = re.compile(r"--[A-Za-z0-9][A-Za-z0-9_-]*")


@dataclass(frozen=True)
class EngineCommand:
    role: str
    module: str  # what the engine runs as: `python -m <module>`
    args: list[str]


@dataclass(frozen=True)
class ArgCheck:
    issues: list[ConfigIssue]
    notes: list[str]  # engines not checked, and why


def engine_commands(plan: Plan) -> list[EngineCommand]:
    """One engine command per role (its instances differ only in ports and ids)."""
    commands: dict[str, EngineCommand] = {}
    for component in plan.components:
        if component.kind != "node_manager" or component.role is None or component.role in commands:
            continue
        engine = getattr(component.spec, "engine", None)
        argv = list(engine.argv) if engine is not None else []
        # the engine's own `-m <module>`, after the status server's (`motor.engine.server ... --`)
        starts = [i + 1 for i in range(len(argv) - 1) if argv[i] == "-m" and argv[i + 1] in PARSERS]
        if starts:
            at = starts[-1]
            commands[component.role] = EngineCommand(component.role, argv[at], argv[at + 1 :])
    return list(commands.values())


def check_engine_args(topology: Topology, plan: Plan) -> ArgCheck:
    by_module: dict[str, list[EngineCommand]] = {}
    for command in engine_commands(plan):
        by_module.setdefault(command.module, []).append(command)
    running = {
        module: subprocess.Popen(
            [sys.executable, "-m", "motor.engine.argcheck", module],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for module in by_module
    }
    issues: list[ConfigIssue] = []
    notes: list[str] = []
    for module, process in running.items():
        commands = by_module[module]
        try:
            out, err = process.communicate(json.dumps([c.args for c in commands]), timeout=CHECK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            notes.append(
                f"{module}: its argument parser did not answer within {CHECK_TIMEOUT_S:g} s; not checked"
            )
            continue
        if process.returncode == NOT_INSTALLED:
            notes.append(f"{module}: {err.strip()}; its engine arguments were not checked")
            continue
        results = _results(out)
        if process.returncode != 0 or results is None or len(results) != len(commands):
            notes.append(
                f"{module}: the argument check failed ({(err.strip() or out.strip())[-300:]}); not checked"
            )
            continue
        for command, refusal in zip(commands, results, strict=True):
            if refusal is not None:
                issues.append(_issue(topology, command, refusal))
    return ArgCheck(issues, notes)


def _results(out: str) -> list[str | None] | None:
    lines = [line for line in out.splitlines() if line.startswith(RESULT)]
    if not lines:
        return None
    parsed = json.loads(lines[-1][len(RESULT) :])
    return parsed if isinstance(parsed, list) else None


def _issue(topology: Topology, command: EngineCommand, refusal: str) -> ConfigIssue:
    spec = topology.roles[command.role]
    keys = {f"--{option_name(key)}": key for key in spec.engine_config}
    key = next((keys[flag] for flag in FLAG.findall(refusal) if flag in keys), None)
    path = f"{spec.section_path}.engine_config" + (f".{key}" if key is not None else "")
    return ConfigIssue(
        path,
        f"the {spec.engine_type} engine's own argument parser refuses its command line: {refusal}; fix the key "
        f"or remove it (`python -m {command.module} --help` lists what it takes)",
    )
