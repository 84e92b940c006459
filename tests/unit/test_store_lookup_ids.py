"""Store connectors' host-local lookup sockets: every engine on one host gets its own id."""

import json
from pathlib import Path
from typing import Any

import pytest

from motor.config import load_config, load_documents
from motor.config.ports import instance_ports
from motor.deploy.engines import EngineLaunchRequest, engine_spec
from motor.kv.store_ids import store_lookup_ids, with_store_lookup_ids
from tests.unit.config_cases import issues_of, seed, sub

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "local"
LOOKUP = ".kv_connector_extra_config.connectors[1].kv_connector_extra_config.lookup_rpc_port"


def multi(store: dict[str, Any]) -> dict[str, Any]:
    return {
        "kv_connector": "MultiConnector",
        "kv_connector_extra_config": {"connectors": [{"kv_connector": "MooncakeConnector"}, store]},
    }


def test_ids_are_the_configured_one_plus_the_ordinal() -> None:
    config = multi(
        {"kv_connector": "AscendStoreConnector", "kv_connector_extra_config": {"lookup_rpc_port": "3"}}
    )
    filled = with_store_lookup_ids(config, 2)
    connectors = filled["kv_connector_extra_config"]["connectors"]
    assert connectors[1]["kv_connector_extra_config"]["lookup_rpc_port"] == "5"
    assert connectors[0] == {"kv_connector": "MooncakeConnector"}, "the transfer connector is left alone"
    assert (
        config["kv_connector_extra_config"]["connectors"][1]["kv_connector_extra_config"]["lookup_rpc_port"]
        == "3"
    )


def test_missing_id_counts_from_zero_and_each_connector_has_its_key() -> None:
    filled = with_store_lookup_ids(multi({"kv_connector": "MooncakeStoreConnector"}), 4)
    assert filled["kv_connector_extra_config"]["connectors"][1]["kv_connector_extra_config"] == {
        "lookup_rpc_port": "4"
    }
    top_level = with_store_lookup_ids({"kv_connector": "MooncakeConnectorStoreV1"}, 1)
    assert top_level["kv_connector_extra_config"] == {"mooncake_rpc_port": "1"}
    assert with_store_lookup_ids({"kv_connector": "LMCacheConnectorV1"}, 1) == {
        "kv_connector": "LMCacheConnectorV1"
    }


def test_ids_are_found_with_their_paths() -> None:
    (found,) = store_lookup_ids(multi({"kv_connector": "MooncakeStoreConnector"}))
    assert (found.path, found.key, found.base) == (LOOKUP, "lookup_rpc_port", 0)
    (bad,) = store_lookup_ids(
        multi(
            {"kv_connector": "MooncakeStoreConnector", "kv_connector_extra_config": {"lookup_rpc_port": "x"}}
        )
    )
    assert bad.base is None
    with pytest.raises(ValueError, match="lookup_rpc_port"):
        with_store_lookup_ids(
            multi(
                {
                    "kv_connector": "MooncakeStoreConnector",
                    "kv_connector_extra_config": {"lookup_rpc_port": -1},
                }
            ),
            0,
        )


def test_colliding_ids_on_a_shared_host_name_the_path_and_both_engines() -> None:
    user, env = seed()
    user["motor_deploy_config"].update(deploy_mode="single_container", p_instances_num=2)
    sub(user, "prefill", 1)["kv_connector_extra_config"]["lookup_rpc_port"] = "2"
    sub(user, "decode", 1)["kv_connector_extra_config"]["lookup_rpc_port"] = "0"
    issues = issues_of(user, env)
    message = issues[f"motor_engine_decode_config.engine_config.kv_transfer_config{LOOKUP}"]
    assert "decode-0 would use lookup_rpc_port 2" in message and "prefill-0" in message


def test_the_seed_ids_do_not_collide_and_separate_hosts_are_not_checked() -> None:
    user, env = seed()
    user["motor_deploy_config"].update(deploy_mode="single_container", p_instances_num=2)
    load_documents(user, env)  # P 0 and 1, D 1 + 2 = 3
    user, env = seed()
    sub(user, "decode", 1)["kv_connector_extra_config"]["lookup_rpc_port"] = "0"
    load_documents(user, env)  # multi_deployment: one engine per pod


def test_a_non_integer_id_is_an_error() -> None:
    user, env = seed()
    sub(user, "prefill", 1)["kv_connector_extra_config"]["lookup_rpc_port"] = "first"
    issues = issues_of(user, env)
    assert (
        "not a non-negative integer"
        in issues[f"motor_engine_prefill_config.engine_config.kv_transfer_config{LOOKUP}"]
    )


def test_local_example_engines_get_distinct_ids(tmp_path: Path) -> None:
    topology = load_config(EXAMPLE / "user_config.json", EXAMPLE / "env.json")
    ids = {}
    for ports in instance_ports(topology.roles):
        launch = engine_spec(
            EngineLaunchRequest(
                topology.roles[ports.role],  # type: ignore[index]
                instance_id=ports.name,
                host="127.0.0.1",
                port=ports.engine_port,
                status_port=ports.engine_status_port,
                store_config=None,
                run_dir=str(tmp_path),
                bootstrap_port=ports.kv_bootstrap_port,
                store_lookup_ordinal=ports.ordinal,
            )
        )
        engine = launch.argv[launch.argv.index("--") + 1 :]
        kv = json.loads(engine[engine.index("--kv-transfer-config") + 1])
        ids[ports.name] = kv["kv_connector_extra_config"]["connectors"][1]["kv_connector_extra_config"][
            "lookup_rpc_port"
        ]
    assert ids == {"prefill-0": "0", "decode-0": "1"}
