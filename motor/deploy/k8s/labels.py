"""Names and labels every motor object carries, so a job's objects can be found and deleted by label."""

CONFIG_MAP = "motor-config"

PART_OF = "app.kubernetes.io/part-of"
MANAGED_BY = "app.kubernetes.io/managed-by"
NAME_LABEL = "app.kubernetes.io/name"
JOB_LABEL = "motor.io/job"
COMPONENT_LABEL = "motor.io/component"
ROLE_LABEL = "motor.io/role"
INDEX_LABEL = "motor.io/index"
CONFIG_HASH_ANNOTATION = "motor.io/config-sha256"


def owner_labels(job_id: str) -> dict[str, str]:
    return {PART_OF: "motor", MANAGED_BY: "motor", JOB_LABEL: job_id}
