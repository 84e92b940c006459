"""examples/local: validates, and turns into the engine command lines docs/real-engine.md promises."""

import json
from pathlib import Path

from motor.config import load_config
from motor.deploy.engines import EngineLaunchRequest, engine_spec
from motor.kv.connectors import DispatchProfile
from motor.kv.pool import engine_store_config

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "local"

BOOTSTRAP_PORT_ENV = "VLLM_MOONCAKE_BOOTSTRAP_PORT"  # where vLLM's MooncakeConnector reads its bootstrap port


def test_example_local_validates_and_launches(tmp_path: Path) -> None:
    topology = load_config(EXAMPLE / "user_config.json", EXAMPLE / "env.json")
    assert topology.profile.profile == DispatchProfile.CONCURRENT
    assert topology.pool is not None and topology.pool.protocol == "tcp"
    store = engine_store_config(topology.pool, master_host="127.0.0.1")

    launches = {
        role: engine_spec(
            EngineLaunchRequest(
                topology.roles[role],
                instance_id=f"{role}-0",
                host="127.0.0.1",
                port=10000 + 2 * k,
                status_port=10001 + 2 * k,
                store_config=store,
                run_dir=str(tmp_path),
            )
        )
        for k, role in enumerate(("prefill", "decode"))
    }
    for role in ("prefill", "decode"):
        launch = launches[role]
        engine = launch.argv[launch.argv.index("--") + 1 :]
        assert {"--enforce-eager", "--no-enable-prefix-caching"} <= set(engine)
        assert engine[engine.index("--block-size") + 1] == "32"
        # unpinned: a pinned worker's Mooncake threads inherit its one core (docs/design/vllm-cpu-pd-stall.md)
        assert launch.env["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
        # one OpenMP thread per engine: three engines' spin-waiting OpenMP teams oversubscribe two cores
        assert launch.env["OMP_NUM_THREADS"] == "1"
        # the model runs in the EngineCore process: no shared-memory queue to a separate worker process
        assert launch.env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
        kv = json.loads(engine[engine.index("--kv-transfer-config") + 1])
        names = [c["kv_connector"] for c in kv["kv_connector_extra_config"]["connectors"]]
        assert names == ["MooncakeConnector", "MooncakeStoreConnector"]
        assert kv["engine_id"] == f"{role}-0"
        assert json.loads(launch.files[launch.env["MOONCAKE_CONFIG_PATH"]])["protocol"] == "tcp"
    assert launches["prefill"].bootstrap_port == 10900
    assert launches["prefill"].env[BOOTSTRAP_PORT_ENV] == "10900"
    assert launches["decode"].bootstrap_port is None


def test_example_transfer_timeout_is_shorter_than_the_lease() -> None:
    topology = load_config(EXAMPLE / "user_config.json", EXAMPLE / "env.json")
    assert topology.pool is not None
    for spec in topology.roles.values():
        assert float(spec.env["VLLM_MOONCAKE_CONNECTOR_TIMEOUT"]) * 1000 < topology.pool.default_kv_lease_ttl
