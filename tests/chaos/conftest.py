"""One chaos cluster per test module: deploying it costs more than most runs on it."""

from collections.abc import Iterator

import pytest

from tests.chaos.cluster import ChaosCluster, ChaosSettings, deploy
from tests.chaos.run import LoadShape

# CI-sized: a lighter load and shorter holds than benchmarks/chaos.py; the whole directory stays within a few
# minutes on 2 cores.
CI_LOAD = LoadShape(rate=8.0, warmup_s=2.0, tail_s=2.0)
CI_HOLD_S = 6.0


@pytest.fixture(scope="module")
def chaos_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChaosCluster]:
    cluster = deploy(tmp_path_factory.mktemp("chaos"), ChaosSettings())
    try:
        yield cluster
    finally:
        cluster.stop()
