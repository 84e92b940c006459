"""The faults the chaos harness injects, one class per row of docs/chaos.md.

A fault is injected, held for `hold_s` (a freeze, a blackhole, an etcd outage), healed (what an operator or the
network would do; most faults are healed by motor itself and do nothing here), and then `recovered` says
whether the cluster is whole again. Every process is signalled by pid, and only processes the cluster runs.
"""

import contextlib
import os
import signal
import time
from dataclasses import dataclass, field

from tests.chaos.cluster import INSTANCES, ChaosCluster, alive, wait_until

MID_WORK_WAIT_S = 15.0


def _signal(pid: int | None, signum: signal.Signals) -> None:
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def _busy(cluster: ChaosCluster, instance: str) -> bool:
    running = cluster.engine_metric(instance, "vllm:num_requests_running")
    return bool(running)


def _wait_busy(cluster: ChaosCluster, instance: str) -> None:
    """Until `instance` works on a request (busy most of the time under load; the fault goes on anyway after
    the wait)."""
    with contextlib.suppress(AssertionError):
        wait_until(lambda: _busy(cluster, instance), MID_WORK_WAIT_S, f"{instance} working", 0.01)


def _restarted(cluster: ChaosCluster, name: str, old_pid: int) -> bool:
    record = cluster.record(name)
    return record["pid"] != old_pid and record["state"] == "healthy"


@dataclass
class Fault:
    name: str
    entry_point: bool = False  # a fault of the process clients talk to: connection errors are its outcome
    hold_s: float = 0.0

    def inject(self, cluster: ChaosCluster) -> None:
        raise NotImplementedError

    def heal(self, cluster: ChaosCluster) -> None:
        """What the world does after `hold_s`; nothing when motor heals the fault itself."""

    def recovered(self, cluster: ChaosCluster) -> bool:
        return cluster.serving_all()

    def notes(self) -> list[str]:
        """What the run's report should say besides the counts."""
        return []


@dataclass
class EngineKilled(Fault):
    """SIGKILL an instance's sim engine while it works on a request; its node manager starts a new one."""

    instance: str = "prefill-0"
    killed: int | None = None

    def inject(self, cluster: ChaosCluster) -> None:
        _wait_busy(cluster, self.instance)
        self.killed = cluster.engine_pid(self.instance)
        assert self.killed is not None, f"no engine found for {self.instance}"
        _signal(self.killed, signal.SIGKILL)

    def recovered(self, cluster: ChaosCluster) -> bool:
        engine = cluster.engine_pid(self.instance)
        return engine is not None and engine != self.killed and cluster.serving_all()


@dataclass
class EngineFrozen(Fault):
    """SIGSTOP an instance's sim engine for `hold_s`, then SIGCONT (if it still exists)."""

    instance: str = "decode-0"
    hold_s: float = 20.0
    frozen: int | None = None

    def inject(self, cluster: ChaosCluster) -> None:
        _wait_busy(cluster, self.instance)
        self.frozen = cluster.engine_pid(self.instance)
        assert self.frozen is not None, f"no engine found for {self.instance}"
        _signal(self.frozen, signal.SIGSTOP)

    def heal(self, cluster: ChaosCluster) -> None:
        _signal(self.frozen, signal.SIGCONT)


@dataclass
class PortBlackholed(Fault):
    """The proxy in front of an engine drops everything for `hold_s` (bytes held, connections unanswered)."""

    hold_s: float = 20.0
    forwarded_at_heal: int = 0

    def inject(self, cluster: ChaosCluster) -> None:
        assert cluster.proxy is not None, "the cluster has no blackhole proxy"
        cluster.proxy.blackhole()

    def heal(self, cluster: ChaosCluster) -> None:
        assert cluster.proxy is not None
        self.forwarded_at_heal = cluster.proxy.forwarded_bytes
        cluster.proxy.restore()

    def recovered(self, cluster: ChaosCluster) -> bool:
        assert cluster.proxy is not None
        return cluster.proxy.forwarded_bytes > self.forwarded_at_heal and cluster.serving_all()


@dataclass
class ComponentKilled(Fault):
    """SIGKILL a component the job supervisor runs (controller, kv-pool, a node manager, the coordinator)."""

    component: str = "controller"
    killed: int | None = None
    below: list[int] = field(default_factory=list)  # a node manager's engine server and engine

    def inject(self, cluster: ChaosCluster) -> None:
        self.killed = cluster.pid(self.component)
        if self.component in INSTANCES:
            self.below = [pid for pid in (cluster.engine_server_pid(self.component),) if pid is not None]
            self.below += [pid for pid in (cluster.engine_pid(self.component),) if pid is not None]
        _signal(self.killed, signal.SIGKILL)

    def recovered(self, cluster: ChaosCluster) -> bool:
        assert self.killed is not None
        if not _restarted(cluster, self.component, self.killed):
            return False
        if self.component == "kv-pool":  # the pool is used again: the engines' links are up (serving_all)
            pool = cluster.pool()
            if pool is None or pool.put_requests == 0:
                return False
        return cluster.serving_all()

    def orphans(self) -> list[int]:
        """Processes below a killed node manager that outlived it (there must be none)."""
        return [pid for pid in self.below if alive(pid)]


@dataclass
class WorkerKilled(Fault):
    """SIGKILL one inference worker of a multi-worker coordinator; its supervisor starts a new one."""

    entry_point: bool = True
    index: int = 0
    killed: int | None = None

    def inject(self, cluster: ChaosCluster) -> None:
        worker = next(w for w in cluster.coordinator_workers() if w["index"] == self.index)
        self.killed = int(worker["pid"])
        _signal(self.killed, signal.SIGKILL)

    def recovered(self, cluster: ChaosCluster) -> bool:
        workers = cluster.coordinator_workers()
        mine = [w for w in workers if w["index"] == self.index]
        return bool(mine) and mine[0]["pid"] != self.killed and all(w["ready"] for w in workers)


@dataclass
class EtcdKilled(Fault):
    """SIGKILL etcd for `hold_s` while an engine restarts (so the controller has status changes to persist),
    then start it again on the same ports and data."""

    hold_s: float = 8.0
    changed: str = "decode-1"
    revision_before: int = 0
    engine: EngineKilled | None = None

    def inject(self, cluster: ChaosCluster) -> None:
        self.revision_before = etcd_revision(cluster, self.changed)
        cluster.etcd.kill()
        self.engine = EngineKilled(name="", instance=self.changed)
        self.engine.inject(cluster)

    def heal(self, cluster: ChaosCluster) -> None:
        cluster.etcd.start()

    def recovered(self, cluster: ChaosCluster) -> bool:
        assert self.engine is not None
        if not self.engine.recovered(cluster):
            return False
        persisted = persisted_statuses(cluster)
        return (
            persisted == cluster.controller_view()
            and etcd_revision(cluster, self.changed) > self.revision_before
        )


@dataclass
class LeaderKilled(Fault):
    """SIGKILL whichever process of a standby pair leads ("controller" or "coordinator"). Once the lock's lease
    expires a live process of the pair takes it: the standby, or the killed one if the job supervisor restarted
    it first and it won the race for the lock (both try as soon as the key is gone). The other one waits as the
    standby."""

    pair: str = "controller"
    killed: int | None = None
    killed_name: str = ""
    new_leader: str | None = None
    took_over_s: float | None = None
    killed_at: float = 0.0

    def __post_init__(self) -> None:
        self.entry_point = self.pair == "coordinator"

    @property
    def names(self) -> tuple[str, str]:
        return self.pair, f"{self.pair}-standby"

    def inject(self, cluster: ChaosCluster) -> None:
        self.killed_name = next(name for name in self.names if cluster.leadership(name) == "leader")
        self.killed = cluster.pid(self.killed_name)
        self.killed_at = time.monotonic()
        _signal(self.killed, signal.SIGKILL)

    def recovered(self, cluster: ChaosCluster) -> bool:
        assert self.killed is not None
        if self.new_leader is None:
            leading = [name for name in self.names if cluster.leadership(name) == "leader"]
            if leading and cluster.pid(leading[0]) != self.killed:
                self.new_leader = leading[0]
                self.took_over_s = time.monotonic() - self.killed_at
        if self.new_leader is None:
            return False
        waiting = next(name for name in self.names if name != self.new_leader)
        return (
            _restarted(cluster, self.killed_name, self.killed)
            and cluster.leadership(self.new_leader) == "leader"
            and cluster.leadership(waiting) == "standby"
            and cluster.serving_all()
        )

    def notes(self) -> list[str]:
        if self.took_over_s is None:
            return [f"{self.pair}: no live process took over"]
        who = (
            "the standby" if self.new_leader != self.killed_name else "the restarted leader (it won the lock)"
        )
        return [f"{self.pair}: {who} led {self.took_over_s:.1f} s after the leader was killed"]


@dataclass
class Combined(Fault):
    """Several faults at once (each injected, then each healed); recovered when all are."""

    faults: list[Fault] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.entry_point = any(fault.entry_point for fault in self.faults)
        self.hold_s = max((fault.hold_s for fault in self.faults), default=0.0)

    def inject(self, cluster: ChaosCluster) -> None:
        for fault in self.faults:
            fault.inject(cluster)

    def heal(self, cluster: ChaosCluster) -> None:
        for fault in self.faults:
            fault.heal(cluster)

    def recovered(self, cluster: ChaosCluster) -> bool:
        return all(fault.recovered(cluster) for fault in self.faults)

    def notes(self) -> list[str]:
        return [note for fault in self.faults for note in fault.notes()]


@dataclass
class KillsInTurn(Fault):
    """Several engine kills one after the other under the same load, each while its engine works on requests
    and once the previous kill's engine serves again; recovered when the last one's does."""

    kills: list[EngineKilled] = field(default_factory=list)
    between_timeout_s: float = 60.0

    def inject(self, cluster: ChaosCluster) -> None:
        for index, kill in enumerate(self.kills):
            kill.inject(cluster)
            if index < len(self.kills) - 1:
                wait_until(
                    lambda kill=kill: kill.recovered(cluster),
                    self.between_timeout_s,
                    f"{kill.instance} serving again after kill {index + 1} of {len(self.kills)}",
                    explain=cluster.diagnosis,
                )

    def recovered(self, cluster: ChaosCluster) -> bool:
        return self.kills[-1].recovered(cluster)

    def notes(self) -> list[str]:
        return [f"{len(self.kills)} kills: {', '.join(kill.instance for kill in self.kills)}"]


def combined_faults(name: str) -> Combined:
    """The pool master, the controller, a prefill and a decode engine at once."""
    return Combined(
        name,
        faults=[
            ComponentKilled("", component="kv-pool"),
            ComponentKilled("", component="controller"),
            EngineKilled("", instance="prefill-0"),
            EngineKilled("", instance="decode-1"),
        ],
    )


def instances_prefix(cluster: ChaosCluster) -> str:
    return f"/motor/{cluster.job_id}/controller/instances/"


def persisted_statuses(cluster: ChaosCluster) -> dict[str, str]:
    prefix = instances_prefix(cluster)
    try:
        values = cluster.etcd.values(prefix)
    except RuntimeError:
        return {}
    return {key.removeprefix(prefix): value["value"]["instance"]["status"] for key, value in values.items()}


def etcd_revision(cluster: ChaosCluster, instance: str) -> int:
    try:
        values = cluster.etcd.values(instances_prefix(cluster) + instance)
    except RuntimeError:
        return 0
    return max((value["mod_revision"] for value in values.values()), default=0)
