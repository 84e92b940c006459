"""What the local backend's operations return when they did their job (failures are motor.deploy.errors)."""

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Deployed:
    """A job that serves: every instance active, the coordinator ready."""

    job_id: str
    run_root: Path
    instances: list[str]
    profile: str  # the dispatch profile
    endpoint: str  # the coordinator's OpenAI API base, without /v1
    model: str
    logs: Path
    prometheus_config: Path
    seconds: float


@dataclass(frozen=True)
class Unchanged:
    """An update that found nothing to do: the config equals the running job's."""

    scale: bool
    run_dir: Path


@dataclass(frozen=True)
class Updated:
    """A scale (`scale`) or config update the job applied and is ready again after."""

    job_id: str
    scale: bool
    instances_per_role: dict[str, int]
    restarted: list[str]
    waiting: list[str]  # node managers whose change takes effect at their next restart
    seconds: float


@dataclass(frozen=True)
class Stopped:
    job_id: str
    components: int
    logs: Path


@dataclass(frozen=True)
class NothingToStop:
    """No such job (`job_id`), or no job at all under `where` (job_id None)."""

    job_id: str | None
    where: Path
