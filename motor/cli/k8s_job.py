"""What `motor deploy/status/stop` show for a Kubernetes job: the Kubernetes backend's results and failures as
text, and the exit codes. Every failed object is printed as `motor: failed Kind/name: reason` on stderr."""

import sys

from motor.cli.failures import EXIT_FAILED, report_failure
from motor.deploy.errors import DeployError
from motor.deploy.k8s import backend
from motor.deploy.k8s.client import KubeClient, KubeError

EXIT_OK = 0
STATUS_COLUMNS = ("NAME", "COMPONENT", "ROLE", "READY", "IMAGE")


def deploy(client: KubeClient, job: backend.Job) -> int:
    try:
        applied = backend.deploy(client, job)
    except DeployError as exc:
        return report_failure(exc, "motor")
    return show_applied(applied)


def update_config(client: KubeClient, job: backend.Job) -> int:
    try:
        result = backend.update_config(client, job)
    except DeployError as exc:
        return report_failure(exc, "motor")
    if isinstance(result, backend.Unchanged):
        return _unchanged(result)
    code = show_applied(result.applied)
    if result.rolled is None:
        return code
    return show_rolled(result.rolled)


def scale(client: KubeClient, job: backend.Job) -> int:
    try:
        result = backend.scale(client, job)
    except DeployError as exc:
        return report_failure(exc, "motor")
    if isinstance(result, backend.Unchanged):
        return _unchanged(result)
    return show_applied(result)


def delete(client: KubeClient, namespace: str, job_id: str, *, delete_namespace: bool = False) -> int:
    return show_deleted(backend.delete(client, namespace, job_id, delete_namespace=delete_namespace))


def show_deleted(deleted: backend.Deleted) -> int:
    if deleted.kept_namespace:
        print(f"kept Namespace/{deleted.namespace}: motor did not create it")
    _failures(deleted.failures)
    if not deleted.deleted and not deleted.failures:
        print(f"nothing to delete: no objects of job {deleted.job_id} in namespace {deleted.namespace}")
    else:
        print(
            f"deleted {len(deleted.deleted)} object(s) of job {deleted.job_id} from namespace {deleted.namespace}"
        )
        for name in deleted.deleted:
            print(f"  {name}")
    return EXIT_FAILED if deleted.failures else EXIT_OK


def status(client: KubeClient, namespace: str, job_id: str) -> int:
    try:
        found = backend.status(client, namespace, job_id)
    except DeployError as exc:
        return report_failure(exc, "motor")
    return show_status(found)


def show_status(found: backend.Status) -> int:
    if not found.deployments:
        print(f"no deployment of job {found.job_id} in namespace {found.namespace}")
        return EXIT_FAILED
    rows = [STATUS_COLUMNS]
    rows += [(d.name, d.component, d.role, d.ready, d.image) for d in found.deployments]
    widths = [max(len(row[i]) for row in rows) for i in range(len(STATUS_COLUMNS))]
    print(f"job {found.job_id} in namespace {found.namespace}:")
    for row in rows:
        print("  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    return EXIT_OK


def show_applied(applied: backend.Applied) -> int:
    result = applied.result
    _failures(result.failures)
    via = f" via {result.method}" if result.method else ""
    if result.failures:
        print(
            f"motor: {len(result.failures)} object(s) failed, {len(result.applied)} applied{via}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    print(f"{applied.summary}: {len(result.applied)} object(s){via}")
    for name in result.applied:
        print(f"  {name}")
    return EXIT_OK


def _unchanged(unchanged: backend.Unchanged) -> int:
    if unchanged.scale:
        print("nothing to scale: the instance counts equal the deployed ones")
    else:
        print(f"nothing to update: the config equals the one deployed in namespace {unchanged.namespace}")
    return EXIT_OK


def show_rolled(rolled: backend.Rolled) -> int:
    if rolled.restart_pod is not None:
        print(f"restart the {rolled.restart_pod} pod to apply the change: every component runs in it")
        return EXIT_OK
    for name in rolled.rolled:
        print(f"  rolled {name} to config revision {rolled.revision}")
    _failures(rolled.failures)
    if rolled.waiting:
        print("takes effect when the engine pods next restart: " + ", ".join(rolled.waiting))
    return EXIT_FAILED if rolled.failures else EXIT_OK


def _failures(failures: list[KubeError]) -> None:
    for exc in failures:
        print(f"motor: failed {exc}", file=sys.stderr)
