"""Every row of docs/chaos.md, one fault at a time and then combined, on one chaos cluster under open-loop load:
no request lost before its first token, none hung, no wrong or repeated token, no stream cut without an error
event, no pool object whose lease never expired, and each row's own outcome."""

import re

import pytest

from tests.chaos.cluster import INSTANCES, ChaosCluster, alive
from tests.chaos.conftest import CI_FREEZE_S, CI_HOLD_S, CI_LOAD
from tests.chaos.faults import (
    ComponentKilled,
    EngineFrozen,
    EngineKilled,
    EtcdKilled,
    KillsInTurn,
    PortBlackholed,
    WorkerKilled,
    combined_faults,
)
from tests.chaos.load import End
from tests.chaos.report import failures
from tests.chaos.run import RunResult, run_fault

pytestmark = pytest.mark.slow


def assert_nothing_lost(result: RunResult) -> None:
    report = result.report
    print(report)
    assert report.violations == [], (report, failures(result.outcomes))
    assert report.succeeded > 0, report


def engine_pids(cluster: ChaosCluster) -> dict[str, int | None]:
    return {name: cluster.engine_pid(name) for name in INSTANCES}


def log_of(cluster: ChaosCluster, component: str) -> str:
    return (cluster.run.run_dir / "logs" / f"{component}.log").read_text(errors="replace")


def test_baseline_without_a_fault_answers_everything(chaos_cluster: ChaosCluster) -> None:
    class NoFault(EngineKilled):
        def inject(self, cluster: ChaosCluster) -> None:
            pass

        def recovered(self, cluster: ChaosCluster) -> bool:
            return cluster.serving_all()

    result = run_fault(chaos_cluster, NoFault("no fault"), CI_LOAD)
    assert_nothing_lost(result)
    assert result.report.succeeded == result.report.sent, failures(result.outcomes)
    # the shared prefixes are found in the pool by the other prefill instance
    assert all(
        (chaos_cluster.engine_metric(name, "vllm:external_prefix_cache_hits_total") or 0) > 0
        for name in ("decode-0", "decode-1")
    )


def test_a_failed_wait_tells_what_each_part_says(chaos_cluster: ChaosCluster) -> None:
    text = chaos_cluster.diagnosis()
    assert "controller: {" in text and "'prefill-0': 'active'" in text
    assert "coordinator routes: {" in text
    assert all(f"'{name}': 1.0" in text for name in INSTANCES)  # every engine's pool link up
    assert "pool master: PoolSnapshot(" in text
    assert all(f"--- {name}.log" in text for name in ("kv-pool", "controller", "coordinator", *INSTANCES))


def test_prefill_engine_killed_mid_prompt(chaos_cluster: ChaosCluster) -> None:
    fault = EngineKilled("prefill engine SIGKILL mid-prompt", instance="prefill-0")
    result = run_fault(chaos_cluster, fault, CI_LOAD)
    assert_nothing_lost(result)
    assert result.report.failed_explicit == 0, failures(result.outcomes)  # nothing reached a client yet
    assert chaos_cluster.engine_pid("prefill-0") not in (None, fault.killed)


def test_decode_engine_killed_mid_stream(chaos_cluster: ChaosCluster) -> None:
    resumed = 'motor_coordinator_replays_total{outcome="resumed"}'
    before = chaos_cluster.coordinator_metric(resumed)
    fault = EngineKilled("decode engine SIGKILL mid-stream", instance="decode-0")
    result = run_fault(chaos_cluster, fault, CI_LOAD)
    assert_nothing_lost(result)
    # replay is on: a stream the kill cut after its first tokens goes on elsewhere (the oracle checked every
    # token of it above), so no client sees an error event
    explicit = [o for o in result.outcomes if o.end is End.ERROR_AFTER_TOKEN]
    assert explicit == [], failures(result.outcomes)
    print(f"streams resumed after the kill: {chaos_cluster.coordinator_metric(resumed) - before:.0f}")


def test_decode_engines_killed_in_turn_mid_stream(chaos_cluster: ChaosCluster) -> None:
    resumed = 'motor_coordinator_replays_total{outcome="resumed"}'
    before = chaos_cluster.coordinator_metric(resumed)
    kills = [EngineKilled("", instance=name) for name in ("decode-0", "decode-1", "decode-0")]
    fault = KillsInTurn("decode engines SIGKILLed in turn mid-stream (3 kills)", kills=kills)
    result = run_fault(chaos_cluster, fault, CI_LOAD)
    assert_nothing_lost(result)
    assert [o for o in result.outcomes if o.end is End.ERROR_AFTER_TOKEN] == [], failures(result.outcomes)
    killed = [kill.killed for kill in kills]
    assert None not in killed and len(set(killed)) == 3, killed  # three engine processes, each killed once
    assert not any(alive(pid) for pid in killed), killed
    print(f"streams resumed over the three kills: {chaos_cluster.coordinator_metric(resumed) - before:.0f}")


def test_engine_frozen(chaos_cluster: ChaosCluster) -> None:
    fault = EngineFrozen("engine frozen (SIGSTOP)", instance="decode-0", hold_s=CI_FREEZE_S)
    result = run_fault(chaos_cluster, fault, CI_LOAD)
    assert_nothing_lost(result)
    # its engine server's health checks time out: the instance leaves routing, and comes back once thawed
    statuses = result.statuses_of("decode-0")
    assert statuses[0] == "active" and "inactive" in statuses and statuses[-1] == "active", statuses
    # a stream the freeze stopped after its first tokens moves on after read_timeout (replay): no error event
    assert [o for o in result.outcomes if o.end is End.ERROR_AFTER_TOKEN] == [], failures(result.outcomes)


def test_port_blackholed(chaos_cluster: ChaosCluster) -> None:
    result = run_fault(chaos_cluster, PortBlackholed("engine port blackholed", hold_s=CI_HOLD_S), CI_LOAD)
    assert_nothing_lost(result)


def test_mooncake_master_killed_costs_hits_not_answers(chaos_cluster: ChaosCluster) -> None:
    engines = engine_pids(chaos_cluster)
    outages = {
        name: chaos_cluster.engine_metric(name, "motor_sim_kv_pool_outages_total") for name in INSTANCES
    }
    fault = ComponentKilled("mooncake_master killed", component="kv-pool")
    result = run_fault(chaos_cluster, fault, CI_LOAD)
    assert_nothing_lost(result)
    assert result.report.succeeded == result.report.sent, failures(result.outcomes)
    assert engine_pids(chaos_cluster) == engines  # no engine crashed or was restarted
    # the engines' metrics show the outage: the store clients that called the pool while the master was gone
    # (a prefill looks every prompt up; a restart takes about a second, so not every engine meets it)
    seen = sum(
        (chaos_cluster.engine_metric(name, "motor_sim_kv_pool_outages_total") or 0) - (outages[name] or 0)
        for name in INSTANCES
    )
    assert seen >= 1
    for name in INSTANCES:  # every engine is back on the pool
        assert chaos_cluster.engine_metric(name, "motor_sim_kv_pool_up") == 1.0
    pool = chaos_cluster.pool()
    assert pool is not None and pool.active_clients == len(INSTANCES) and pool.put_requests > 0


def test_controller_killed_and_restored_from_etcd(chaos_cluster: ChaosCluster) -> None:
    fault = ComponentKilled("controller killed", component="controller")
    result = run_fault(chaos_cluster, fault, CI_LOAD)
    assert_nothing_lost(result)
    assert result.report.succeeded == result.report.sent, failures(result.outcomes)
    restored = re.findall(
        r"persistence on \(etcd at [^)]*\): (\d+) instance\(s\) restored", log_of(chaos_cluster, "controller")
    )
    assert restored[-1] == str(len(INSTANCES))
    # the coordinator kept routing on the four instances throughout: the restarted controller pushed its first
    # set only once their node managers' heartbeats confirmed them
    assert {frozenset(routed) for _, routed in result.routed if routed is not None} == {frozenset(INSTANCES)}


def test_node_manager_killed_takes_its_engine_and_starts_a_fresh_one(chaos_cluster: ChaosCluster) -> None:
    fault = ComponentKilled("node manager killed", component="prefill-1")
    result = run_fault(chaos_cluster, fault, CI_LOAD)
    assert_nothing_lost(result)
    assert len(fault.below) == 2 and fault.orphans() == []
    assert chaos_cluster.engine_pid("prefill-1") not in (None, *fault.below)


def test_coordinator_worker_killed(chaos_cluster: ChaosCluster) -> None:
    fault = WorkerKilled("coordinator worker killed", index=0)
    result = run_fault(chaos_cluster, fault, CI_LOAD)
    assert_nothing_lost(result)
    # what the dead worker held failed as connection errors, at once (nothing hung, see above)
    others = [o for o in result.outcomes if o.end is not End.OK]
    assert all(o.end in (End.CONNECTION_BEFORE_TOKEN, End.CONNECTION_AFTER_TOKEN) for o in others), failures(
        result.outcomes
    )


def test_etcd_killed_controller_works_from_memory_and_persists_again(chaos_cluster: ChaosCluster) -> None:
    fault = EtcdKilled("etcd killed (an engine restarts meanwhile)", hold_s=CI_HOLD_S)
    result = run_fault(chaos_cluster, fault, CI_LOAD)
    assert_nothing_lost(result)
    # it noticed, kept going from memory, retried with backoff and wrote once etcd was back
    controller_log = log_of(chaos_cluster, "controller")
    assert re.search(r"etcd at \S+ written again after \d+ failed attempts", controller_log), controller_log[
        -3000:
    ]


def test_combined_faults(chaos_cluster: ChaosCluster) -> None:
    fault = combined_faults("combined: master + controller + prefill-0 and decode-1 engines")
    result = run_fault(chaos_cluster, fault, CI_LOAD)
    assert_nothing_lost(result)
