"""The local backend: runs a Plan as processes on this machine (`motor deploy/status/stop/logs` for deploy_mode
local, and `motor deploy --update-instance-num/--update-config` on a running job). One job supervisor per job
(motor.deploy.local.job_supervisor) starts and restarts the components. State lives in `<run_root>/<job_id>/`:
state.json, job.json, the config copy, one log file per component.

The operations return typed results (motor.deploy.local.results), report progress as typed events
(motor.deploy.local.events) and raise motor.deploy.errors; they print nothing: motor.cli shows them."""

from motor.deploy.local.deploy import deploy_local, with_local_model_paths
from motor.deploy.local.logs import component_log, log_text
from motor.deploy.local.state import deployed_jobs, running_job
from motor.deploy.local.status import JobView, look
from motor.deploy.local.stop import stop_local
from motor.deploy.local.update import update_local

__all__ = [
    "JobView",
    "component_log",
    "deploy_local",
    "deployed_jobs",
    "log_text",
    "look",
    "running_job",
    "stop_local",
    "update_local",
    "with_local_model_paths",
]
