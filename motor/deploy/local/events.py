"""What the local backend reports while it works (a deploy, an update, a stop can take minutes): typed events
handed to the `Progress` callback the caller passes in. `seconds` count from the start of the operation."""

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Deploying:
    job_id: str
    run_dir: str


@dataclass(frozen=True)
class SupervisorStarted:
    seconds: float
    pid: int
    log: str


@dataclass(frozen=True)
class ComponentStarted:
    seconds: float
    name: str
    pid: int
    ports: dict[str, int]


@dataclass(frozen=True)
class Readiness:
    """One look at the job while it becomes ready: each expected instance's status as the controller has it
    (None: not registered), the removed ones still registered, whether the coordinator is ready."""

    seconds: float
    instances: dict[str, str | None]
    leaving: list[str]
    coordinator_ready: bool

    @property
    def summary(self) -> str:
        text = ", ".join(f"{name} {status or 'not registered'}" for name, status in self.instances.items())
        if self.leaving:
            text += f"; still registered: {', '.join(self.leaving)}"
        return text + f"; coordinator {'ready' if self.coordinator_ready else 'not ready'}"


@dataclass(frozen=True)
class Updating:
    job_id: str
    scale: bool
    changed: list[str]


@dataclass(frozen=True)
class UpdateStep:
    seconds: float
    step: str  # as the job supervisor recorded it


@dataclass(frozen=True)
class StoppingStarted:
    """A deploy failed or was interrupted: what it started is stopped."""


@dataclass(frozen=True)
class StoppingJob:
    job_id: str
    run_dir: str


@dataclass(frozen=True)
class AskingSupervisor:
    pid: int


@dataclass(frozen=True)
class KillingSupervisor:
    pid: int
    grace_s: float


@dataclass(frozen=True)
class SupervisorStopped:
    names: list[str]


@dataclass(frozen=True)
class SupervisorGone:
    pid: int


@dataclass(frozen=True)
class Stopping:
    names: list[str]


Event = (
    Deploying
    | SupervisorStarted
    | ComponentStarted
    | Readiness
    | Updating
    | UpdateStep
    | StoppingStarted
    | StoppingJob
    | AskingSupervisor
    | KillingSupervisor
    | SupervisorStopped
    | SupervisorGone
    | Stopping
)
Progress = Callable[[Event], None]


def ignore(_event: Event) -> None:
    """The progress of a caller that shows none."""
