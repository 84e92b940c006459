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


@dataclass
class RoutingWatch:
    """Samples the coordinator's instance set every `interval_s` in a thread (None: no coordinator answered)."""

    cluster: ChaosCluster
    interval_s: float = 0.2
    samples: list[tuple[float, set[str] | None]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._thread = threading.Thread(target=self._watch, name="chaos-routing-watch", daemon=True)
        self._thread.start()

    def stop(self) -> list[tuple[float, set[str] | None]]:
        self._stop.set()
        self._thread.join(timeout=10)
        return self.samples

    def _watch(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.samples.append((time.monotonic(), self.cluster.routed_or_none()))


def run_fault(cluster: ChaosCluster, fault: Fault, shape: LoadShape = LoadShape()) -> RunResult:
    """Run `fault` under `shape`'s load. Raises AssertionError when the cluster is not whole before the fault or
    does not recover within the timeout (the load is stopped and joined either way)."""
    wait_until(cluster.serving_all, HEALTHY_BEFORE_S, f"the cluster whole before {fault.name!r}")
    deadline_s = cluster.settings.infer_timeout_s + 15.0
    load = OpenLoopLoad(cluster.api_url, shape.rate, deadline_s).start()
    watch = RoutingWatch(cluster)
    try:
        time.sleep(shape.warmup_s)
        injected_at = time.monotonic()
        fault.inject(cluster)
        time.sleep(fault.hold_s)
        healed_at = time.monotonic()
        fault.heal(cluster)
        wait_until(
            lambda: fault.recovered(cluster), shape.recovery_timeout_s, f"recovery from {fault.name!r}"
        )
        recovered_at = time.monotonic()
        time.sleep(shape.tail_s)
    finally:
        outcomes = load.join()
        routed = watch.stop()
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
    return RunResult(report, outcomes, injected_at, healed_at, recovered_at, routed)
