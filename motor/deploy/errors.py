"""What a deploy backend raises when it cannot do what it was asked; the CLI says it and picks the exit code.

Each error's message is a sentence for the user (the CLI prefixes the command); the subclasses carry what the
CLI shows with it.
"""

from collections.abc import Sequence
from pathlib import Path

from motor.runtime.logs import tail


class DeployError(Exception):
    """The operation failed or was not done. `details` are shown one per line below the message; `log` names
    the log whose last lines (`log_tail`, read when the error is raised) say more."""

    def __init__(self, message: str, *, details: Sequence[str] = (), log: Path | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = list(details)
        self.log = log
        self.log_tail = tail(log) if log is not None else None


class UsageError(DeployError):
    """The request itself cannot be served as given (an ambiguous job, an unknown name, an invalid new plan)."""


class Refused(DeployError):
    """The change differs from the deployed job in ways the operation may not change; `details` lists them,
    `hint` (if any) names the operation that does."""

    def __init__(self, message: str, *, details: Sequence[str], hint: str | None = None) -> None:
        super().__init__(message, details=details)
        self.hint = hint


class UpdateFailed(DeployError):
    """An update of a running job that the job's supervisor could not finish: the job runs what it reports and
    the deployed config stays the baseline."""

    def __init__(self, message: str, *, job_id: str, log: Path | None = None) -> None:
        super().__init__(message, log=log)
        self.job_id = job_id
