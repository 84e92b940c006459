"""The local backend: runs a Plan as processes on this machine (`motor deploy/status/stop/logs` for deploy_mode
local, and `motor deploy --update-instance-num/--update-config` on a running job). One job supervisor per job
(motor.deploy.local.job_supervisor) starts and restarts the components. State lives in `<run_root>/<job_id>/`:
state.json, job.json, the config copy, one log file per component."""

from motor.deploy.local.deploy import deploy_local, with_local_model_paths
from motor.deploy.local.logs import logs_local
from motor.deploy.local.status import status_local, watch_local
from motor.deploy.local.stop import stop_local
from motor.deploy.local.update import update_local

__all__ = [
    "deploy_local",
    "logs_local",
    "status_local",
    "stop_local",
    "update_local",
    "watch_local",
    "with_local_model_paths",
]
