"""examples/sim is a valid local 1P+1D sim deployment with the pool on and timeouts that fit the lease."""

from pathlib import Path

from motor.config import load_config
from motor.config.ports import instance_ports

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sim"


def test_examples_sim_validates_as_a_local_pd_deployment_with_the_pool() -> None:
    topology = load_config(EXAMPLE / "user_config.json", EXAMPLE / "env.json")
    user = topology.user
    assert user.motor_deploy_config.deploy_mode == "local"
    assert user.motor_deploy_config.hardware_type == "cpu"
    assert {role: spec.engine_type for role, spec in topology.roles.items()} == {
        "prefill": "sim",
        "decode": "sim",
    }
    assert topology.pool is not None and topology.pool.protocol == "tcp"
    assert topology.profile.profile.value == "prefill_first"
    assert [p.name for p in instance_ports(topology.roles)] == ["prefill-0", "decode-0"]
    controller = user.motor_controller_config.instance_config
    heartbeat = user.motor_nodemanger_config.basic_config.heartbeat_interval_seconds
    assert heartbeat * 3 <= controller.instance_heartbeat_timeout < controller.instance_expired_timeout
