"""Names of the environment variables motor's processes exchange, defined once.

Most of what a component needs travels in its compiled spec (`motor.protocol.specs`); the environment carries
only what is late-bound (the pod IP a component advertises) or secret (the controller token, the API keys, the
etcd credentials: a spec names them by reference and never holds them).
"""

CONTROLLER_TOKEN = "MOTOR_CONTROLLER_TOKEN"
"""The deployment secret: the controller and the coordinators hold it; node managers get a credential derived
from it (motor.protocol.credentials) and engines nothing."""

API_KEYS = "MOTOR_API_KEYS"
"""The coordinator's API keys (`api_key_config.valid_keys`), one per line; the spec names this variable."""

ETCD_USERNAME = "MOTOR_ETCD_USERNAME"
ETCD_PASSWORD = "MOTOR_ETCD_PASSWORD"
"""The controller's etcd credentials (etcd authentication is on when the username is set)."""

ADVERTISE_HOST = "MOTOR_ADVERTISE_HOST"
"""The address a component tells others to reach it at (127.0.0.1 locally, the pod IP in Kubernetes)."""

RUN_DIR = "MOTOR_RUN_DIR"
"""A component's own directory for logs, pid files and generated files."""

RUN_ROOT = "MOTOR_RUN_ROOT"
"""Where `motor deploy` keeps local jobs (default ./.motor)."""

POD_IP = "POD_IP"
"""Set by Kubernetes from the downward API (status.podIP); `$(POD_IP)` in argv and env expands to it."""

STORE_CONFIG_PATH = "MOONCAKE_CONFIG_PATH"
"""The Mooncake store config JSON an engine's pool connector reads."""

VLLM_HOST_IP = "VLLM_HOST_IP"
