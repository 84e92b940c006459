"""The KV pool master (`kind="kv_pool"`): the `mooncake_master` command, when the topology has a pool."""

from pathlib import PurePosixPath

from motor.deploy.plan.context import PlanContext
from motor.deploy.plan.model import KV_POOL, Component, probes
from motor.kv.pool import master_args

MASTER_BINARY = "mooncake_master"


def compile_kv_pool(context: PlanContext) -> tuple[Component, ...]:
    pool = context.topology.pool
    if pool is None:
        return ()
    # Locally the binary sits next to the interpreter (the venv's bin); in the image it is on PATH.
    master = (
        str(PurePosixPath(context.python).parent / MASTER_BINARY)
        if context.target == "local"
        else MASTER_BINARY
    )
    topology_env = context.topology.env
    return (
        Component(
            name=KV_POOL,
            kind="kv_pool",
            argv=(master, *master_args(pool, bind_host=context.bind_host)),
            env=context.env(
                topology_env.motor_common_env,
                topology_env.motor_kv_cache_pool_env,
                context.component_run_dir(KV_POOL),
            ),
            ports={"rpc": pool.port, "metrics": pool.metrics_port},
            probes=probes("metrics", "/health"),
        ),
    )
