"""The planner's loop around the pure parts (motor/planner/service.py), with a stand-in cluster: the traffic is
measured over window_s (the capacities over the whole history), a job whose instances are not all active is not
sized, and a change is carried out step by step and journaled."""

import asyncio
from pathlib import Path
from typing import Any

from motor.config.models import PlannerConfig
from motor.config.planner import planner_bounds
from motor.observability.traffic import CoordinatorSample
from motor.planner.journal import Journal
from motor.planner.readings import EngineReading, Reading
from motor.planner.service import Planner
from motor.protocol.controller import InstanceView
from motor.protocol.specs import PlannerSpec, SecretRef
from tests.fixtures.planner import instance_view


class Cluster:
    """What the planner reads the instances from (a scraper's `instances`), and scales."""

    def __init__(self, instances: list[InstanceView]) -> None:
        self.instances = instances
        self.counts = {"prefill": 1, "decode": 1}
        self.scaled: list[dict[str, int]] = []


class Actuator:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    async def counts(self) -> dict[str, int]:
        return dict(self.cluster.counts)

    async def busy(self) -> str | None:
        return None

    async def scale(self, counts: dict[str, int], progress: Any) -> None:
        self.cluster.scaled.append(dict(counts))
        self.cluster.counts = dict(counts)
        self.cluster.instances = [
            instance_view(f"{role}-{i}") for role in ("prefill", "decode") for i in range(counts[role])
        ]


def spec(tmp_path: Path, **planner: Any) -> PlannerSpec:
    config = PlannerConfig(enable=True, max_instances=4, window_s=5.0, cooldown_s=0.0, **planner)
    return PlannerSpec(
        name="planner",
        job_id="job",
        advertise_host="127.0.0.1",
        bind_host="127.0.0.1",
        run_dir=str(tmp_path / "planner"),
        port=1,
        config=config,
        bounds=planner_bounds(config, {"prefill": 0, "decode": 0}),
        controller_url="http://127.0.0.1:3",
        coordinator_mgmt_url="http://127.0.0.1:4",
        token=SecretRef(env="T"),
        backend="local",
        job_dir=str(tmp_path),
    )


def engine(role: str, t: float, prompt: float, output: float, running: float) -> EngineReading:
    """An engine that finished one request per second since t = 0 with `prompt`/`output` tokens each."""
    return EngineReading(
        role=role,
        prompt_computed=prompt * t,
        generated=output * t,
        finished=t,
        running=running,
        waiting=0.0,
        kv_usage=0.1,
        computed_sum=prompt * t if role == "prefill" else 0.0,
        computed_count=t if role == "prefill" else 0.0,
        output_sum=output * t if role == "decode" else 0.0,
        output_count=t if role == "decode" else 0.0,
        steps=t * 10,
        itl_count=t * 10 * running if role == "decode" else 0.0,
        itl_sum=t * 10 * running * (0.005 + 0.004 * running) if role == "decode" else 0.0,
    )


def readings_with_a_phase_change() -> list[Reading]:
    """30 s of 1 request/s: 2,000-token prompts for 20 s, then 100-token ones (the decode side steady)."""
    readings = []
    for t in range(31):
        prompt = 2000.0 * min(t, 20) + 100.0 * max(t - 20, 0)
        engines = {
            "prefill-0": EngineReading("prefill", prompt, t, t, 1, 1, 0.1, 500.0, prompt, t),
            "decode-0": engine("decode", t, 0, 20.0, 2.0 + (t % 3)),
        }
        readings.append(
            Reading(at=float(t), coordinator=CoordinatorSample(float(t), float(t), 0.0), engines=engines)
        )
    return readings


def planner_of(tmp_path: Path, cluster: Cluster, **config: Any) -> Planner:
    planner = Planner(spec(tmp_path, **config), cluster, Actuator(cluster), Journal(tmp_path / "planner"))  # type: ignore[arg-type]
    return planner


def test_the_traffic_is_measured_over_the_window(tmp_path: Path) -> None:
    cluster = Cluster([instance_view("prefill-0"), instance_view("decode-0")])
    planner = planner_of(tmp_path, cluster)
    for reading in readings_with_a_phase_change():
        planner._remember(reading)
    asyncio.run(planner.decide_once())
    assert planner.figures is not None and planner.figures.prompt_tokens == 100.0  # the last 5 s only
    assert len(planner.readings) == 31  # the capacities keep the whole history


def test_a_job_whose_instances_are_not_all_active_is_not_sized(tmp_path: Path) -> None:
    cluster = Cluster([instance_view("prefill-0"), instance_view("decode-0", status="initial")])
    planner = planner_of(tmp_path, cluster)
    decision = asyncio.run(planner.decide_once())
    assert decision.kind == "hold" and "instances not active yet: 1P+0D of 1P+1D" in decision.reason


def test_a_change_is_carried_out_and_journaled(tmp_path: Path) -> None:
    cluster = Cluster([instance_view("prefill-0"), instance_view("decode-0")])
    planner = planner_of(tmp_path, cluster)
    for reading in readings_with_a_phase_change()[:10]:  # 2,000-token prompts: prefill needs more than one
        planner._remember(reading)

    async def decide_and_wait() -> None:
        decision = await planner.decide_once()
        assert decision.kind == "scale", decision.reason
        assert planner._change is not None
        await planner._change

    asyncio.run(decide_and_wait())
    assert cluster.scaled and cluster.scaled[-1]["prefill"] > 1
    events = [entry["event"] for entry in Journal(tmp_path / "planner").entries()]
    assert events == ["change", "done"]
    status = planner.status()
    assert status.applying is None and status.targets == cluster.scaled[-1]
