"""How the CLI says that a deploy backend could not do its job (a motor.deploy.errors.DeployError), and the exit
code it ends with: 2 when the request itself was wrong, else 1."""

import sys

from motor.cli.config_args import EXIT_USAGE
from motor.deploy.errors import DeployError, Refused, UpdateFailed, UsageError

EXIT_FAILED = 1


def report_failure(error: DeployError, command: str, *, program: str = "motor") -> int:
    """Print `error` on stderr as `command: message`, then its details, hint and log tail; the exit code.
    `program` prefixes the hint (the command without its option)."""
    print(f"{command}: {error.message}", file=sys.stderr)
    for line in error.details:
        print(f"  {line}", file=sys.stderr)
    if isinstance(error, Refused) and error.hint:
        print(f"{program}: {error.hint}", file=sys.stderr)
    if error.log is not None:
        print(f"--- last lines of {error.log} ---\n{error.log_tail}\n---", file=sys.stderr)
    if isinstance(error, UpdateFailed):
        print(
            f"the job runs what the supervisor reports in `motor status --job-id {error.job_id}`; the deployed "
            "config stays the baseline: fix the cause and run the update again",
            file=sys.stderr,
        )
    return EXIT_USAGE if isinstance(error, UsageError) else EXIT_FAILED
