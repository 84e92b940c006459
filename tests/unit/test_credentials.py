"""Credentials by role: instance credentials, the engine's allowlisted environment, redacted command lines."""

import json

from motor.node_manager.engine_env import engine_environment
from motor.protocol.credentials import (
    REDACTED,
    instance_credential,
    instance_credential_env,
    is_credential_env,
    redacted_argv,
)


def test_an_instance_credential_is_bound_to_its_instance_and_token() -> None:
    credential = instance_credential("token-a", "prefill-0")
    assert credential == instance_credential("token-a", "prefill-0")
    assert credential != instance_credential("token-a", "prefill-1")
    assert credential != instance_credential("token-b", "prefill-0")
    assert "token-a" not in credential and len(credential) == 64
    assert instance_credential_env("prefill-0") == "MOTOR_INSTANCE_CREDENTIAL_PREFILL_0"


def test_credential_names_are_recognised_by_their_words() -> None:
    for name in (
        "MOTOR_CONTROLLER_TOKEN",
        "MOTOR_INSTANCE_CREDENTIAL_DECODE_3",
        "HF_TOKEN",
        "aws_secret_key",
    ):
        assert is_credential_env(name), name
    for name in ("PATH", "VLLM_HOST_IP", "MOONCAKE_CONFIG_PATH"):
        assert not is_credential_env(name), name


def test_an_engine_inherits_only_the_allowlist_and_never_motor_credentials() -> None:
    ambient = {
        "PATH": "/usr/bin",
        "LC_ALL": "C.UTF-8",
        "VLLM_CPU_KVCACHE_SPACE": "4",
        "PYTHONPATH": "/src",
        "MOTOR_CONTROLLER_TOKEN": "deployment-secret",
        "MOTOR_INSTANCE_CREDENTIAL_PREFILL_0": "nm-credential",
        "MOTOR_API_KEYS": "k1",
        "MOTOR_ETCD_PASSWORD": "etcd",
        "HF_TOKEN": "hf-not-named-by-the-spec",
        "AWS_SECRET_ACCESS_KEY": "cloud",
        "VLLM_API_KEY": "not-inherited-either",
        "KUBERNETES_SERVICE_HOST": "10.96.0.1",
        "UNRELATED": "x",
    }
    spec_env = {"MOONCAKE_CONFIG_PATH": "/run/store.json", "MOTOR_CONTROLLER_TOKEN": "from-a-config"}
    env = engine_environment(ambient, spec_env, {"HF_TOKEN": "hf-named", "MOTOR_API_KEYS": "k1"})
    assert env == {
        "PATH": "/usr/bin",
        "LC_ALL": "C.UTF-8",
        "VLLM_CPU_KVCACHE_SPACE": "4",
        "PYTHONPATH": "/src",
        "MOONCAKE_CONFIG_PATH": "/run/store.json",
        "HF_TOKEN": "hf-named",
    }


def test_command_lines_are_logged_without_credential_values() -> None:
    argv = [
        "vllm",
        "serve",
        "/models/m",
        "--api-key",
        "sk-1",
        "--hf-token=hf-2",
        "--max-num-batched-tokens",
        "512",
        "--tokenizer",
        "/models/t",
        "--kv-transfer-config",
        json.dumps({"kv_connector": "X", "kv_connector_extra_config": {"secret_key": "s3", "port": 1}}),
    ]
    shown = redacted_argv(argv)
    assert shown[:10] == [
        "vllm",
        "serve",
        "/models/m",
        "--api-key",
        REDACTED,
        f"--hf-token={REDACTED}",
        "--max-num-batched-tokens",
        "512",
        "--tokenizer",
        "/models/t",
    ]
    assert json.loads(shown[11]) == {
        "kv_connector": "X",
        "kv_connector_extra_config": {"secret_key": REDACTED, "port": 1},
    }
    assert not any(secret in " ".join(shown) for secret in ("sk-1", "hf-2", "s3"))
