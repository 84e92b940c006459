"""The job file `<run_dir>/job.json`: what the job supervisor runs, in start order.

`motor deploy` writes it from the plan before it starts the supervisor; `--update-instance-num` and
`--update-config` write the next generation and send the supervisor SIGHUP; after applying a generation the
supervisor writes back what it runs. The supervisor never recomputes the topology: each entry holds the
command, environment, ports and probe URLs of one component, and a `revision` (a digest of its command,
environment and spec) — a running component is restarted when the revision it was started with differs from
the job file's.
"""

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from motor.deploy.local.state import LOG_DIR, write_private
from motor.deploy.plan import LOCAL_HOST, Component, ComponentKind, Plan
from motor.protocol import env as env_names
from motor.protocol.specs import spec_file_name

JOB_FILE = "job.json"


class ComponentJob(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    kind: ComponentKind
    argv: list[str]
    env: dict[str, str]  # on top of the supervisor's environment
    ports: dict[str, int]
    startup_url: str
    liveness_url: str
    run_dir: str  # the component's working directory (MOTOR_RUN_DIR)
    log: str
    revision: str
    ordinal: int | None = None  # a node manager's k on this host (motor.config.ports)
    # ports the job supervisor listens on itself and hands to the component (name → host:port): they outlive
    # the component's process, so a restart or a standby's takeover refuses no connection
    held_listeners: dict[str, str] = Field(default_factory=dict)


class JobFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    generation: int = 0
    components: list[ComponentJob]

    def component(self, name: str) -> ComponentJob | None:
        return next((c for c in self.components if c.name == name), None)


def job_path(run_dir: Path) -> Path:
    return Path(run_dir) / JOB_FILE


def read_job(run_dir: Path) -> JobFile:
    """Raises OSError or pydantic.ValidationError when the file is missing or malformed."""
    return JobFile.model_validate_json(job_path(run_dir).read_text(encoding="utf-8"))


def write_job(run_dir: Path, job: JobFile) -> None:
    """Readable only by the owner: environments may hold env.json's secrets."""
    write_private(job_path(run_dir), job)


def revision(component: Component, spec_text: str | None) -> str:
    what = {"argv": list(component.argv), "env": component.env, "spec": spec_text}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


def job_from_plan(
    plan: Plan, run_dir: Path, *, generation: int = 0, kept_revisions: Mapping[str, str] | None = None
) -> JobFile:
    """The job file that runs `plan`; `kept_revisions` (name → revision) overrides the revision of components
    whose change should wait for their next restart."""
    kept = kept_revisions or {}
    components = []
    for component in plan.components:
        spec_text = plan.files.get(spec_file_name(component.name)) if component.spec is not None else None
        components.append(
            ComponentJob(
                name=component.name,
                kind=component.kind,
                argv=list(component.argv),
                env=dict(component.env),
                ports=dict(component.ports),
                startup_url=component.probe_url("startup", LOCAL_HOST),
                liveness_url=component.probe_url("liveness", LOCAL_HOST),
                run_dir=component.env.get(env_names.RUN_DIR) or str(Path(run_dir) / component.name),
                log=str(Path(run_dir) / LOG_DIR / f"{component.name}.log"),
                revision=kept.get(component.name) or revision(component, spec_text),
                ordinal=component.ordinal,
                held_listeners=_held_listeners(component),
            )
        )
    return JobFile(generation=generation, components=components)


def _held_listeners(component: Component) -> dict[str, str]:
    """The coordinator's inference port: what clients connect to."""
    if component.kind != "coordinator" or component.spec is None:
        return {}
    return {"infer": f"{component.spec.bind_host}:{component.ports['infer']}"}
