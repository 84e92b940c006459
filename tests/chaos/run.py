"""One chaos run: load on, inject a fault, hold it, heal it, wait until the cluster is whole, load off, check the
pool's leases, report. Shared by tests/chaos (CI-sized) and benchmarks/chaos.py (the longer report)."""

import threading
import time
from dataclasses import dataclass, field

from tests.chaos.cluster import ChaosCluster, wait_until
from tests.chaos.faults import Fault
from tests.chaos.load import OpenLoopLoad, Outcome
from tests.chaos.report import RunReport

HEALTHY_BEFORE_S = 90.0
RECOVERY_POLL_S = 0.25  # each look asks the controller, the coordinator and every engine


@dataclass(frozen=True)
class LoadShape:
    rate: float = 10.0  # requests per second
    warmup_s: float = 2.0  # load before the fault
    tail_s: float = 3.0  # load after the cluster recovered
    recovery_timeout_s: float = 90.0


@dataclass(frozen=True)
class RunResult:
    report: RunReport
    outcomes: list[Outcome]
    injected_at: float  # time.monotonic()
    healed_at: float
    recovered_at: float
    routed: list[tuple[float, set[str] | None]]  # the coordinator's instance set, sampled through the run
    statuses: list[
        tuple[float, dict[str, str]]
    ]  # the controller's instance statuses, sampled through the run

    def statuses_of(self, instance: str) -> list[str]:
        """The statuses the controller gave `instance` in the order they were seen, repeats collapsed."""
        seen: list[str] = []
        for _, view in self.statuses:
            status = view.get(instance)
            if status is not None and (not seen or seen[-1] != status):
                seen.append(status)
        return seen


@dataclass
class ClusterWatch:
    """Samples, every `interval_s` in a thread, the coordinator's instance set (None: no coordinator answered)
    and the controller's instance statuses (skipped while no controller answers)."""

    cluster: ChaosCluster
    interval_s: float = 0.2
    routed: list[tuple[float, set[str] | None]] = field(default_factory=list)
    statuses: list[tuple[float, dict[str, str]]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._thread = threading.Thread(target=self._watch, name="chaos-cluster-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _watch(self) -> None:
        while not self._stop.wait(self.interval_s):
            now = time.monotonic()
            self.routed.append((now, self.cluster.routed_or_none()))
            view = self.cluster.controller_view()
            if view:
                self.statuses.append((now, view))


def run_fault(cluster: ChaosCluster, fault: Fault, shape: LoadShape = LoadShape()) -> RunResult:
    """Run `fault` under `shape`'s load. Raises AssertionError when the cluster is not whole before the fault or
    does not recover within the timeout (the load is stopped and joined either way)."""
    wait_until(
        cluster.serving_all,
        HEALTHY_BEFORE_S,
        f"the cluster whole before {fault.name!r}",
        explain=cluster.diagnosis,
    )
    deadline_s = cluster.settings.infer_timeout_s + 15.0
    load = OpenLoopLoad(cluster.api_url, shape.rate, deadline_s).start()
    watch = ClusterWatch(cluster)
    try:
        time.sleep(shape.warmup_s)
        injected_at = time.monotonic()
        fault.inject(cluster)
        time.sleep(fault.hold_s)
        healed_at = time.monotonic()
        fault.heal(cluster)
        wait_until(
            lambda: fault.recovered(cluster),
            shape.recovery_timeout_s,
            f"recovery from {fault.name!r}",
            poll_s=RECOVERY_POLL_S,
            explain=cluster.diagnosis,
        )
        recovered_at = time.monotonic()
        time.sleep(shape.tail_s)
    finally:
        outcomes = load.join()
        watch.stop()
    leaked = cluster.keys_left_after_leases()
    report = RunReport.of(
        fault.name,
        shape.rate,
        outcomes,
        entry_point=fault.entry_point,
        recovery_s=recovered_at - healed_at,
        keys_leaked=leaked,
        notes=fault.notes(),
    )
    return RunResult(report, outcomes, injected_at, healed_at, recovered_at, watch.routed, watch.statuses)
