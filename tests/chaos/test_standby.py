"""Active/standby (pyMotor's standby_config) under load: the controller and the coordinator each run as a pair
electing its leader in etcd; killing the leader hands the lock, once its lease expired (TTL 3 s here), to a live
process of the pair: the standby, or the killed process if the job supervisor restarted it first and it won the
race for the lock. The other one waits as the standby."""

import re
from collections.abc import Iterator

import pytest

from tests.chaos.cluster import INSTANCES, ChaosCluster, ChaosSettings, deploy
from tests.chaos.conftest import CI_LOAD
from tests.chaos.faults import LeaderKilled
from tests.chaos.load import End
from tests.chaos.report import failures
from tests.chaos.run import run_fault

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def standby_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChaosCluster]:
    cluster = deploy(tmp_path_factory.mktemp("standby"), ChaosSettings(standby=True, blackholed=None))
    try:
        yield cluster
    finally:
        cluster.stop()


def test_one_of_each_pair_leads_and_the_standby_serves_nothing(standby_cluster: ChaosCluster) -> None:
    for pair in ("controller", "coordinator"):
        roles = sorted(standby_cluster.leadership(name) or "silent" for name in (pair, f"{pair}-standby"))
        assert roles == ["leader", "standby"], pair


def test_leader_controller_killed_the_lock_passes_without_routing_changes(
    standby_cluster: ChaosCluster,
) -> None:
    fault = LeaderKilled("leader controller killed", pair="controller")
    result = run_fault(standby_cluster, fault, CI_LOAD)
    print(result.report)
    assert result.report.violations == [], failures(result.outcomes)
    assert result.report.succeeded == result.report.sent, failures(result.outcomes)
    assert fault.took_over_s is not None and fault.new_leader is not None
    # the coordinator routed on the same four instances throughout: the new leader restored them from etcd
    # and pushed its first set only once their node managers were heard from
    assert {frozenset(routed) for _, routed in result.routed if routed is not None} == {frozenset(INSTANCES)}
    log = (standby_cluster.run.run_dir / "logs" / f"{fault.new_leader}.log").read_text(errors="replace")
    assert re.findall(r"(\d+) instance\(s\) restored", log)[-1] == str(len(INSTANCES)), log[-3000:]


def test_leader_coordinator_killed_no_connection_is_refused(standby_cluster: ChaosCluster) -> None:
    fault = LeaderKilled("leader coordinator killed", pair="coordinator")
    result = run_fault(standby_cluster, fault, CI_LOAD)
    print(result.report)
    assert result.report.violations == [], failures(result.outcomes)
    assert fault.took_over_s is not None
    # the job supervisor holds the inference port: what arrived after the kill waited in its backlog for the
    # next leader and was answered; only what the killed process held was lost, as connection errors
    after = [o for o in result.outcomes if o.started > fault.killed_at]
    assert after and all(o.end is End.OK for o in after), failures(result.outcomes)
    lost = [o for o in result.outcomes if o.end is not End.OK]
    assert all(o.started <= fault.killed_at for o in lost), failures(result.outcomes)
    assert all(o.end in (End.CONNECTION_BEFORE_TOKEN, End.CONNECTION_AFTER_TOKEN) for o in lost), failures(
        result.outcomes
    )
    print(
        f"lost with the killed leader: {len(lost)}; sent after the kill: {len(after)}, all answered, the slowest "
        f"in {max(o.seconds for o in after):.1f} s (the takeover took {fault.took_over_s:.1f} s)"
    )
