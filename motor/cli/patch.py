"""`motor patch status`: every runtime fix motor knows, whether it applies on this machine, and why."""

import argparse

from motor.engine.patches.facts import Facts, gather_facts
from motor.engine.patches.registry import decide_all
from motor.kv.connectors import REGISTRY


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = subparsers.add_parser("patch", help="runtime fixes for the engines", description=__doc__)
    actions = parser.add_subparsers(dest="patch_command", required=True, metavar="ACTION")
    status = actions.add_parser(
        "status",
        help="list the known fixes, whether each applies here and why",
        description="Fixes are applied by the engine server to the engines it starts, never to files on disk.",
    )
    status.set_defaults(handler=run_status)


def run_status(_: argparse.Namespace) -> int:
    print(status_report(gather_facts(probe_accelerator=True)))
    return 0


def status_report(facts: Facts) -> str:
    accelerator = {True: "yes", False: "no", None: "unknown"}[facts.accelerator_present]
    lines = [
        f"vLLM {facts.vllm_version or 'not installed'}, vllm-ascend {facts.vllm_ascend_version or 'not installed'}, "
        f"torch {facts.torch_version or 'not installed'}, accelerator: {accelerator}",
    ]
    for patch, decision in decide_all(facts):
        lines.append(f"{patch.name}: {'APPLIES' if decision.applies else 'not applied'}")
        lines.append(f"  what: {patch.summary}")
        lines.append(f"  why:  {decision.why}")
        connectors = sorted(name for name, spec in REGISTRY.items() if patch.name in spec.patches)
        if connectors:
            lines.append(f"  for:  {', '.join(connectors)}")
        if patch.targets:
            lines.append(f"  when: {patch.targets[0]} is imported")
    return "\n".join(lines)
