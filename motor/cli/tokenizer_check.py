"""Under scheduler_type kv_cache_affinity the coordinator loads the publishing engines' tokenizer when it starts;
a local job's coordinator reads it from this machine, so `motor validate` and `motor deploy` look for it first
(motor.config.kv_routing holds the rules that need no file). On Kubernetes the files are the pods' to read."""

from dataclasses import dataclass

from motor.config import ConfigIssue, Topology
from motor.config.compat import engine_option
from motor.config.kv_events import KV_EVENTS_ROLES, kv_events_enabled
from motor.tokenize import has_chat_template, tokenizer_problem

WHY = "scheduler_type kv_cache_affinity: the coordinator loads the engines' tokenizer from here"


@dataclass(frozen=True)
class TokenizerCheck:
    issues: list[ConfigIssue]
    notes: list[str]


def check_tokenizer(topology: Topology) -> TokenizerCheck:
    issues: list[ConfigIssue] = []
    notes: list[str] = []
    if not kv_events_enabled(topology.user):
        return TokenizerCheck(issues, notes)
    for role, spec in topology.roles.items():
        if role not in KV_EVENTS_ROLES or spec.engine_type != "vllm":
            continue
        config = spec.engine_config
        option = "tokenizer" if engine_option(config, "tokenizer") else "model"
        path = engine_option(config, option)
        if not path:
            continue  # no model at all: the config's own rule names it
        where = f"{spec.section_path}.engine_config.{option}"
        problem = tokenizer_problem("vllm", str(path))
        if problem is not None:
            issues.append(
                ConfigIssue(
                    where, f"{WHY}: {problem}; point it at a model directory with its tokenizer files"
                )
            )
        elif engine_option(config, "chat_template"):
            notes.append(
                f"{spec.section_path}.engine_config.chat_template: the coordinator renders chat requests with "
                f"{path}'s own template, not this one: their prefix matches will be off"
            )
        elif not has_chat_template(str(path)):
            notes.append(
                f"{where}: {path} has no chat template: the engines refuse chat requests, the coordinator "
                "places them by load"
            )
    return TokenizerCheck(issues, notes)
