"""The cluster the chaos harness breaks: examples/sim scaled to 2 prefill + 2 decode instances, deployed by the
local backend (its job supervisor restarts every component, the real `mooncake_master` included), the
controller persisting to a real etcd the harness runs itself, and a blackhole proxy in front of one engine.

Everything listens on 127.0.0.1 on free ports; `ChaosCluster.stop()` stops every process the cluster started
(by the recorded identities, `motor stop`'s path), etcd and the proxy.
"""

import base64
import dataclasses
import json
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from motor.cli import local_job
from motor.config import load_config
from motor.deploy.plan import Plan, build_plan
from motor.kvstore.client import StoreClient
from motor.pool.metrics import MetricsUnavailable, PoolSnapshot, scrape_pool
from motor.protocol.controller import ControllerState, bearer
from motor.protocol.specs import NodeManagerSpec, dump_spec, spec_file_name
from motor.runtime.net import free_local_ports
from tests.chaos.proxy import BlackholeProxy
from tests.fixtures.control import ConfigPair, LocalRun, merge, pid_alive, sim_config
from tests.fixtures.etcd import etcd_binary

INSTANCES = ("prefill-0", "prefill-1", "decode-0", "decode-1")
LEASE_TTL_MS = 2000
DIAGNOSIS_LOG_LINES = 12
PUT_START_DISCARD_S = 30.0  # mooncake_master's default put_start_discard_timeout_sec
# A standby takes over within the lock's TTL of its leader's death (pyMotor's default TTL is 10 s).
STANDBY = {
    "enable_master_standby": True,
    "master_lock_ttl": 3,
    "master_standby_check_interval": 1.0,
    "master_lock_retry_interval": 1.0,
}  # short, so that a run can check that every lease expired without waiting 11 s
HTTP_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class ChaosSettings:
    """The knobs of a chaos deployment (the defaults are the CI runs')."""

    coordinator_workers: int = 2
    standby: bool = False
    blackholed: str | None = "decode-1"  # the instance behind the blackhole proxy
    first_token_timeout_s: float = 5.0
    read_timeout_s: float = 5.0
    infer_timeout_s: float = 30.0
    prefill_ms_per_token: float = 1.0
    itl_ms: float = 20.0
    replay: bool = True  # exception_config.reschedule_config.enable: streams cut by an engine go on

    def overrides(self, etcd_port: int) -> dict[str, Any]:
        engine = {"prefill_ms_per_token": self.prefill_ms_per_token, "itl_ms": self.itl_ms}
        standby = {"standby_config": STANDBY} if self.standby else {}
        etcd = {"enable_etcd_persistence": True, "etcd_host": "127.0.0.1", "etcd_port": etcd_port}
        return {
            "motor_deploy_config": {"p_instances_num": 2, "d_instances_num": 2},
            "motor_controller_config": {"etcd_config": etcd, **standby},
            "motor_coordinator_config": {
                "inference_workers_config": {"num_workers": self.coordinator_workers},
                "exception_config": {
                    "max_retry": 6,
                    "retry_delay": 0.2,
                    "first_token_timeout": self.first_token_timeout_s,
                    "infer_timeout": self.infer_timeout_s,
                    "reschedule_config": {"enable": self.replay},
                },
                "timeout_config": {"read_timeout": self.read_timeout_s, "connection_timeout": 2},
                **(
                    {"etcd_config": {"etcd_host": "127.0.0.1", "etcd_port": etcd_port}} | standby
                    if self.standby
                    else {}
                ),
            },
            "motor_engine_prefill_config": {"engine_config": engine},
            "motor_engine_decode_config": {"engine_config": engine},
            "kv_cache_pool_config": {"default_kv_lease_ttl": LEASE_TTL_MS},
        }


class EtcdProcess:
    """A real etcd on fixed free ports, killable and restartable on the same ports and data."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.client_port, self.peer_port = free_local_ports(2)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    def start(self, timeout_s: float = 30.0) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        client, peer = self.url, f"http://127.0.0.1:{self.peer_port}"
        argv = [
            etcd_binary(),
            "--name", "motor-chaos",
            "--data-dir", str(self.directory / "data"),
            "--listen-client-urls", client,
            "--advertise-client-urls", client,
            "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"motor-chaos={peer}",
            "--log-level", "warn",
        ]  # fmt: skip
        with (self.directory / "etcd.log").open("ab") as log:
            self.process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        wait_until(self.healthy, timeout_s, "etcd healthy")

    def healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/health", timeout=1.0).json().get("health") == "true"
        except (httpx.HTTPError, ValueError):
            return False

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None and self.process.poll() is None else None

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def values(self, prefix: str) -> dict[str, dict[str, Any]]:
        """key → {"value": its JSON value, "mod_revision": n} of every key under `prefix`; read with etcdctl, so
        the harness shares no client code with motor."""
        etcdctl = str(Path(etcd_binary()).parent / "etcdctl")
        result = subprocess.run(
            [etcdctl, "--endpoints", self.url, "get", "--prefix", prefix, "-w", "json"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        if result.returncode != 0:
            raise RuntimeError(f"etcdctl get {prefix}: {result.stderr}")
        return {
            base64.b64decode(kv["key"]).decode(): {
                "value": json.loads(base64.b64decode(kv["value"])),
                "mod_revision": int(kv["mod_revision"]),
            }
            for kv in json.loads(result.stdout).get("kvs", [])
        }


def wait_until(
    condition: Callable[[], bool],
    timeout_s: float,
    what: str,
    poll_s: float = 0.1,
    explain: Callable[[], str] | None = None,
) -> float:
    """Poll `condition` until it holds; the seconds it took. AssertionError after `timeout_s`, carrying
    `explain()` when given."""
    began = time.monotonic()
    while not condition():
        if time.monotonic() - began > timeout_s:
            raise AssertionError(f"not within {timeout_s:g} s: {what}{_explained(explain)}")
        time.sleep(poll_s)
    return time.monotonic() - began


def _explained(explain: Callable[[], str] | None) -> str:
    if explain is None:
        return ""
    try:
        return f"\n{explain()}"
    except Exception as exc:  # the diagnosis must not hide the failure it explains
        return f"\n(no diagnosis: {exc!r})"


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return []


@dataclass
class ChaosCluster:
    run: LocalRun
    etcd: EtcdProcess
    settings: ChaosSettings
    proxy: BlackholeProxy | None = None

    # ---- where things are -----------------------------------------------------------------------------------

    @property
    def api_url(self) -> str:
        return self.run.api_url

    @property
    def mgmt_url(self) -> str:
        return self.run.mgmt_url

    @property
    def job_id(self) -> str:
        return self.run.job_id

    def state(self) -> dict[str, Any]:
        return self.run.state()

    def record(self, name: str) -> dict[str, Any]:
        return next(c for c in self.state()["components"] if c["name"] == name)

    def pid(self, name: str) -> int:
        return int(self.record(name)["pid"])

    def engine_server_pid(self, instance: str) -> int | None:
        try:
            return int(json.loads((self.run.run_dir / instance / "engine.pid").read_text())["pid"])
        except (OSError, ValueError, KeyError):
            return None

    def engine_pid(self, instance: str) -> int | None:
        """The sim engine of `instance`: the engine server's child whose command line is the simulator with
        that engine id (so a kill can never hit another process)."""
        server = self.engine_server_pid(instance)
        if server is None:
            return None
        for child in children(server):
            argv = cmdline(child)
            if "motor.engine.sim" in argv and "--kv-transfer-config" in argv:
                transfer = json.loads(argv[argv.index("--kv-transfer-config") + 1])
                if transfer.get("engine_id") == instance:
                    return child
        return None

    def engine_port(self, instance: str) -> int:
        return int(self.record(instance)["ports"]["engine"])

    # ---- what the components say ----------------------------------------------------------------------------

    def controller_view(self) -> dict[str, str]:
        """instance id → status as the (leading) controller sees it; {} when it does not answer."""
        state = self.state()
        try:
            answer = httpx.get(
                f"{state['controller_url']}/controller/instances",
                headers=bearer(state["token"]),
                timeout=HTTP_TIMEOUT_S,
            )
            views = ControllerState.model_validate(answer.json()).instances
        except (httpx.HTTPError, ValueError):
            return {}
        return {view.instance.id: view.instance.status for view in views}

    def routed(self) -> set[str]:
        """The instance ids in the coordinator's set (empty when it does not answer)."""
        return self.routed_or_none() or set()

    def leadership(self, name: str) -> str | None:
        """ "leader" or "standby" as the process of component `name` says on its probe port (None: no answer)."""
        try:
            port = self.record(name)["ports"]["probe"]
            return httpx.get(f"http://127.0.0.1:{port}/leadership", timeout=HTTP_TIMEOUT_S).json()["role"]
        except (httpx.HTTPError, ValueError, KeyError, StopIteration):
            return None

    def coordinator_metric(self, name: str) -> float:
        """The sum of the coordinator's series `name` (labels included in `name`; 0 when it has none)."""
        text = httpx.get(f"{self.mgmt_url}/metrics", timeout=HTTP_TIMEOUT_S).text
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + " "))

    def routed_or_none(self) -> set[str] | None:
        """The coordinator's instance set, or None when no coordinator answers (set() is an empty set)."""
        try:
            body = httpx.get(f"{self.mgmt_url}/instances", timeout=HTTP_TIMEOUT_S).json()
        except (httpx.HTTPError, ValueError):
            return None
        return {instance["id"] for instance in body.get("instances", [])}

    def coordinator_workers(self) -> list[dict[str, Any]]:
        try:
            return httpx.get(f"{self.mgmt_url}/liveness", timeout=HTTP_TIMEOUT_S).json().get("workers", [])
        except (httpx.HTTPError, ValueError):
            return []

    def engine_metric(self, instance: str, name: str) -> float | None:
        """A sim engine's unlabelled-by-extra series `name` (None when it does not answer)."""
        try:
            text = httpx.get(
                f"http://127.0.0.1:{self.engine_port(instance)}/metrics", timeout=HTTP_TIMEOUT_S
            ).text
        except httpx.HTTPError:
            return None
        for line in text.splitlines():
            if line.split("{", 1)[0] == name:
                return float(line.rsplit(" ", 1)[1])
        return None

    def pool(self) -> PoolSnapshot | None:
        try:
            return scrape_pool(self.state()["pool_metrics_url"])
        except (MetricsUnavailable, ValueError, KeyError):
            return None

    def serving_all(self) -> bool:
        """Every instance active at the controller and in the coordinator's set, every engine's pool link up."""
        view = self.controller_view()
        if set(view) != set(INSTANCES) or set(view.values()) != {"active"}:
            return False
        if self.routed() != set(INSTANCES):
            return False
        return all(self.engine_metric(name, "motor_sim_kv_pool_up") == 1.0 for name in INSTANCES)

    def diagnosis(self) -> str:
        """What the components say right now and the end of each log: the text a failed wait shows, so that a
        run on another machine tells which part never came back."""
        pool = self.pool()
        lines = [
            f"controller: {self.controller_view() or 'no answer'}",
            f"coordinator routes: {self.routed_or_none()}",
            "pool link up: "
            + str({name: self.engine_metric(name, "motor_sim_kv_pool_up") for name in INSTANCES}),
            f"pool master: {'no answer' if pool is None else pool}",
            "components: " + str({c["name"]: (c["pid"], c["state"]) for c in self.state()["components"]}),
        ]
        for log in sorted((self.run.run_dir / "logs").glob("*.log")):
            tail = log.read_text(errors="replace").splitlines()[-DIAGNOSIS_LOG_LINES:]
            lines += [f"--- {log.name} (last {len(tail)} lines)", *(line[:300] for line in tail)]
        return "\n".join(lines)

    # ---- pool leases ----------------------------------------------------------------------------------------

    def keys_left_after_leases(self) -> int:
        """Remove every object of the job without force, once every lease granted so far expired: the objects
        that stay are held by a lease that never expired (leaked). An object whose writer was killed between
        its put's start and end is not removable either ("not all replicas are complete") until the master
        discards the unfinished put (`put_start_discard_timeout_sec`): while objects remain, the removal is
        repeated until that has passed, by one client. A fresh client for each check: the master may have been
        restarted since the last one."""
        time.sleep(LEASE_TTL_MS / 1000 + 0.5)
        give_up = time.monotonic() + PUT_START_DISCARD_S + 2.0
        with StoreClient.connect(self._store_config() | {"global_segment_size": 0}) as store:
            while True:
                store.remove_matching("^motor-sim/")
                after = self.pool()
                if after is None:
                    raise AssertionError("the pool master does not answer its metrics")
                if after.key_count == 0 or time.monotonic() >= give_up:
                    return after.key_count
                time.sleep(1.0)

    def _store_config(self) -> dict[str, Any]:
        """The store config the engines got (their spec carries it as a file)."""
        spec = json.loads((self.run.run_dir / "config" / spec_file_name("prefill-0")).read_text())
        files = spec["engine"]["files"]
        return json.loads(next(text for path, text in files.items() if path.endswith(".mooncake.json")))

    # ---- the end --------------------------------------------------------------------------------------------

    def stop(self) -> None:
        local_job.stop(self.run.run_root, self.run.job_id)
        if self.proxy is not None:
            self.proxy.close()
        self.etcd.stop()


def deploy(
    workdir: Path, settings: ChaosSettings = ChaosSettings(), ready_timeout_s: float = 180.0
) -> ChaosCluster:
    """Start etcd, plan examples/sim with the chaos settings, put the blackhole proxy in front of one engine,
    deploy locally and wait until everything serves. On failure everything started is stopped."""
    etcd = EtcdProcess(workdir / "etcd")
    etcd.start()
    config = sim_config(workdir / "config", overrides=settings.overrides(etcd.client_port))
    if settings.standby:
        config = _with_probe_ports(config)
    env = json.loads(config.env.read_text())
    transfer_timeouts = {"ASCEND_CONNECT_TIMEOUT": "1000", "ASCEND_TRANSFER_TIMEOUT": "1000"}  # < the lease
    env = merge(
        env, {"motor_engine_prefill_env": transfer_timeouts, "motor_engine_decode_env": transfer_timeouts}
    )
    config.env.write_text(json.dumps(env, indent=2))
    run = LocalRun(config, workdir / "run", config.doc["motor_deploy_config"]["job_id"])
    cluster = ChaosCluster(run, etcd, settings)
    try:
        topology = load_config(config.user, config.env)
        plan = build_plan(
            topology, target="local", config_dir=str(run.run_dir / "config"), run_dir=str(run.run_dir)
        )
        if settings.blackholed is not None:
            plan, cluster.proxy = _behind_proxy(plan, settings.blackholed)
        if local_job.deploy(plan, topology, run.run_root, ready_timeout=ready_timeout_s) != 0:
            raise RuntimeError(f"deploying the chaos cluster failed; logs in {run.run_dir / 'logs'}")
        if cluster.proxy is not None:  # on the planned port, which `motor deploy` checks is free
            cluster.proxy.start()
        wait_until(cluster.serving_all, 60, "every instance active, routed and on the pool")
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _with_probe_ports(config: ConfigPair) -> ConfigPair:
    """Standby probe ports inside the free block sim_config took (its ports base+20 … base+23 are unused)."""
    base = config.coordinator_api["coordinator_api_infer_port"]
    doc = merge(
        config.doc,
        {
            "motor_controller_config": {"standby_config": {"probe_port": base + 20}},
            "motor_coordinator_config": {"standby_config": {"probe_port": base + 22}},
        },
    )
    config.user.write_text(json.dumps(doc, indent=2))
    return ConfigPair(config.directory, config.user, config.env, doc)


def _behind_proxy(plan: Plan, instance: str) -> tuple[Plan, BlackholeProxy]:
    """The plan with `instance`'s engine moved to a free port and the proxy on its planned port, forwarding there.
    The instance registers its planned port (the controller refuses any other), so the coordinator's legs go
    through the proxy, while the engine server's health probes reach the engine directly."""
    component = plan.component(instance)
    spec = component.spec
    assert isinstance(spec, NodeManagerSpec)
    planned = str(spec.engine.port)
    (engine_port,) = free_local_ports(1)
    argv = list(spec.engine.argv)
    for i, arg in enumerate(argv[:-1]):
        if arg in ("--engine-port", "--port") and argv[i + 1] == planned:
            argv[i + 1] = str(engine_port)
    assert argv != spec.engine.argv, f"no engine port {planned} in {instance}'s engine command"
    moved = spec.model_copy(update={"engine": spec.engine.model_copy(update={"argv": argv})})
    files = {**plan.files, spec_file_name(instance): dump_spec(moved)}
    components = tuple(
        dataclasses.replace(c, spec=moved) if c.name == instance else c for c in plan.components
    )
    return dataclasses.replace(plan, files=files, components=components), BlackholeProxy(
        spec.engine.port, engine_port
    )


def alive(pid: int | None) -> bool:
    return pid is not None and pid_alive(pid)
