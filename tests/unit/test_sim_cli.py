import json

import pytest

from motor.engine.sim.cli import parse_config


def test_defaults_name_the_engine_by_its_address_and_have_no_pool() -> None:
    config = parse_config(["--port", "0"], environ={})
    assert config.engine_id == ""
    assert config.bound_to(9100).engine_id == "sim-127.0.0.1-9100" and config.bound_to(9100).port == 9100
    assert config.kv_role == "kv_both"
    assert config.served_model_names == ("motor-sim",)
    assert config.store_config_path is None
    assert config.block_size == 16
    assert config.faults.model_dump(exclude_defaults=True) == {}


def test_role_and_engine_id_come_from_the_kv_transfer_config() -> None:
    transfer = {"kv_connector": "MooncakeStoreConnector", "kv_role": "kv_producer", "engine_id": "prefill-0"}
    config = parse_config(["--kv-transfer-config", json.dumps(transfer)], environ={})
    assert (config.kv_role, config.engine_id, config.kv_connector) == (
        "kv_producer",
        "prefill-0",
        "MooncakeStoreConnector",
    )
    assert config.writes_pool
    override = parse_config(["--kv-transfer-config", json.dumps(transfer), "--engine-id", "p1"], environ={})
    assert override.engine_id == "p1" and override.bound_to(9100).engine_id == "p1"


def test_a_consumer_does_not_write_the_pool() -> None:
    config = parse_config(["--kv-transfer-config", '{"kv_role": "kv_consumer"}'], environ={})
    assert not config.writes_pool


def test_served_model_names_accept_lists_and_repeats() -> None:
    config = parse_config(
        ["--model", "/models/x", "--served-model-name", "a", "b", "--served-model-name", "c"], environ={}
    )
    assert config.served_model_names == ("a", "b", "c")
    assert config.model_name == "a"
    assert parse_config(["--model", "x"], environ={}).served_model_names == ("x",)


def test_store_config_from_flag_or_environment() -> None:
    assert parse_config([], environ={"MOONCAKE_CONFIG_PATH": "/e.json"}).store_config_path == "/e.json"
    assert (
        parse_config(
            ["--store-config", "/f.json"], environ={"MOONCAKE_CONFIG_PATH": "/e.json"}
        ).store_config_path
        == "/f.json"
    )


def test_latency_batch_and_fault_flags() -> None:
    config = parse_config(
        [
            "--overhead-ms",
            "2",
            "--prefill-ms-per-token",
            "0.5",
            "--itl-ms",
            "10",
            "--itl-batch-factor",
            "0.1",
            "--max-num-seqs",
            "8",
            "--fault-crash-after",
            "3",
            "--fault-hang",
            "--fault-slowdown",
            "2.5",
            "--fault-error-rate",
            "0.25",
            "--fault-kv-put-fail",
            "--fault-kv-get-fail",
            "--fault-kv-corrupt",
            "--fault-health-down",
            "--no-enable-prefix-caching",
        ],
        environ={},
    )
    assert (config.latency.overhead_ms, config.latency.itl_batch_factor, config.max_batch) == (2, 0.1, 8)
    assert config.faults.model_dump() == {
        "crash_after": 3,
        "hang": True,
        "slowdown": 2.5,
        "error_rate": 0.25,
        "kv_put_fail": True,
        "kv_get_fail": True,
        "kv_corrupt": True,
        "health_down": True,
    }
    assert not config.enable_prefix_caching


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tensor-parallel-size", "2"], "unrecognized arguments: --tensor-parallel-size"),
        (["--kv-transfer-config", "{nope"], "--kv-transfer-config: not valid JSON"),
        (["--kv-transfer-config", "[]"], "must be a JSON object"),
        (["--kv-transfer-config", '{"kv_role": "kv_reader"}'], "--kv-transfer-config: kv_role"),
        (["--fault-error-rate", "1.5"], "must be between 0 and 1"),
        (["--block-size", "0"], "must be >= 1"),
        (["--itl-ms", "fast"], "is not a float"),
        (["--max-b", "3"], "unrecognized arguments: --max-b"),
        (
            ["--prefill-tokens-per-s", "10"],
            "--prefill-tokens-per-s: capacity model settings need --capacity-model",
        ),
        (["--no-kv-preemption"], "--kv-preemption: capacity model settings need --capacity-model"),
        (
            ["--capacity-model", "--itl-ms", "5"],
            "--itl-ms: the latency model does not apply with --capacity-model",
        ),
        (
            ["--capacity-model", "--num-gpu-blocks-override", "16", "--max-model-len", "512"],
            "--max-model-len: 512 tokens need 32 KV blocks of 16, more than --num-gpu-blocks-override 16",
        ),
        (["--capacity-model", "--max-num-batched-tokens", "0"], "must be >= 1"),
        (["--virtual-engines", "0"], "must be >= 1"),
        (["--port", "65535", "--virtual-engines", "2"], "ports 65535..65536 go beyond 65535"),
    ],
)
def test_bad_flags_exit_with_a_message_naming_them(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_config(argv, environ={})
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
