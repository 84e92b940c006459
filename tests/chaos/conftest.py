"""One chaos cluster per test module: deploying it costs more than most runs on it."""

from collections.abc import Iterator

import pytest

from motor.engine.server.app import ServerOptions
from tests.chaos.cluster import ChaosCluster, ChaosSettings, deploy
from tests.chaos.run import LoadShape

# CI-sized: a lighter load and shorter holds than benchmarks/chaos.py; the whole directory stays within a few
# minutes on 2 cores.
CI_LOAD = LoadShape(rate=8.0, warmup_s=2.0, tail_s=2.0)
CI_HOLD_S = 6.0
# A frozen engine is declared abnormal by its engine server after `failure_threshold` probes that each time out
# (plus the interval between them); the node manager's poll and heartbeat then tell the controller. A freeze
# shorter than that never shows in the instance's status, so the freeze lasts that long and a few seconds more.
FROZEN_DETECTED_S = ServerOptions.failure_threshold * (
    ServerOptions.probe_timeout_s + ServerOptions.probe_interval_s
)
CI_FREEZE_S = FROZEN_DETECTED_S + 4.0


@pytest.fixture(scope="module")
def chaos_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChaosCluster]:
    cluster = deploy(tmp_path_factory.mktemp("chaos"), ChaosSettings())
    try:
        yield cluster
    finally:
        cluster.stop()
