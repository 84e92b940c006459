"""The planner on Kubernetes, against the kmock emulator (tests/integration/test_k8s_apply.py's `cluster`) and a
stand-in controller that lists as active the instances whose Deployment exists and that it did not terminate:
its manifests (the only pod with a service-account token, bound to a namespaced Role), and its scale path, which
drains every instance through the controller while its Deployment still exists, then deletes it, and converts a
role under a full budget by removing first (docs/planner.md#kubernetes)."""

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from motor.config import load_documents
from motor.config.models import PlannerConfig
from motor.config.planner import planner_bounds
from motor.deploy.k8s.client import KubeClient
from motor.deploy.k8s.manifests import ConfigTexts, build_manifests
from motor.deploy.k8s.rbac import PLANNER_ACCOUNT, PLANNER_RULES
from motor.deploy.plan import build_plan
from motor.planner.actuate import carry_out
from motor.planner.kubernetes import KubernetesActuator
from motor.planner.scrape import Scraper
from motor.protocol.controller import ControllerState
from motor.runtime.net import free_local_ports
from tests.fixtures.planner import instance_view
from tests.integration.k8s_support import SIM_ENV, sim_user_config, write_config
from tests.integration.test_k8s_apply import Cluster, cluster  # noqa: F401 (the emulator fixture)
from tests.integration.test_k8s_manifests import validate_all

NAMESPACE = "simjob"
PLANNER = {"enable": True, "max_instances": 4}
TOKEN = "test-token"


class StandInController:
    """`GET /controller/instances` and `POST /controller/terminate_instance` as the planner calls them."""

    def __init__(self, deployments: Callable[[], set[str]]) -> None:
        self._deployments = deployments
        self.terminated: list[str] = []
        self.deployed_when_drained: dict[str, bool] = {}
        self.port = free_local_ports(1)[0]
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def active(self) -> list[str]:
        names = self._deployments() - set(self.terminated)
        return sorted(name for name in names if name.split("-")[0] in ("prefill", "decode"))

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/controller/instances", self._instances)
        app.router.add_post("/controller/terminate_instance", self._terminate)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _instances(self, request: web.Request) -> web.Response:
        assert request.headers["Authorization"] == f"Bearer {TOKEN}"
        views = [instance_view(name) for name in self.active()]
        return web.json_response(ControllerState(instances=views, coordinators=[]).model_dump(mode="json"))

    async def _terminate(self, request: web.Request) -> web.Response:
        name = (await request.json())["instance_id"]
        self.deployed_when_drained[name] = name in self._deployments()
        self.terminated.append(name)
        return web.json_response({"instance_id": name, "node_manager_stopped": True})


@pytest.fixture
async def controller(cluster: Cluster) -> AsyncIterator[StandInController]:  # noqa: F811
    def deployments() -> set[str]:
        return {name for kind, name in cluster.stored() if kind == "Deployment"}

    stand_in = StandInController(deployments)
    await stand_in.start()
    yield stand_in
    await stand_in.stop()


async def deployed(cluster: Cluster, tmp_path: Path, prefill: int, decode: int) -> None:  # noqa: F811
    user = sim_user_config(prefill=prefill, decode=decode)
    user["motor_planner_config"] = PLANNER
    assert await cluster.motor("deploy", "--config-dir", write_config(tmp_path / "sim", user)) == 0


def test_only_the_planner_pod_gets_a_token_and_its_role_is_namespaced() -> None:
    user = sim_user_config()
    user["motor_planner_config"] = PLANNER
    topology = load_documents(user, SIM_ENV)
    texts = ConfigTexts(json.dumps(user), json.dumps(SIM_ENV))
    objects = [
        o
        for f in build_manifests(build_plan(topology, target="kubernetes"), topology, texts)
        for o in f.objects
    ]
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for obj in objects:
        by_kind.setdefault(obj["kind"], []).append(obj)
    assert {"ClusterRole", "ClusterRoleBinding"}.isdisjoint(by_kind)
    (role,) = by_kind["Role"]
    assert role["metadata"]["namespace"] == NAMESPACE and role["rules"] == PLANNER_RULES
    (binding,) = by_kind["RoleBinding"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": PLANNER_ACCOUNT, "namespace": NAMESPACE}
    ]
    tokens = {
        d["metadata"]["name"]: d["spec"]["template"]["spec"]["automountServiceAccountToken"]
        for d in by_kind["Deployment"]
    }
    assert [name for name, mounted in tokens.items() if mounted] == ["planner"]
    planner = next(d for d in by_kind["Deployment"] if d["metadata"]["name"] == "planner")
    assert planner["spec"]["template"]["spec"]["serviceAccountName"] == PLANNER_ACCOUNT
    validate_all(objects)


async def test_removed_instances_are_drained_before_their_deployment_goes_and_a_conversion_removes_first(
    cluster: Cluster,  # noqa: F811
    controller: StandInController,
    tmp_path: Path,
) -> None:
    await deployed(cluster, tmp_path, prefill=2, decode=2)
    stored = cluster.stored()
    assert {
        ("ServiceAccount", PLANNER_ACCOUNT),
        ("Role", PLANNER_ACCOUNT),
        ("RoleBinding", PLANNER_ACCOUNT),
    } <= set(stored)
    bounds = planner_bounds(PlannerConfig(**PLANNER), {"prefill": 0, "decode": 0})
    steps: list[str] = []
    async with aiohttp.ClientSession() as session:
        scraper = Scraper(session, controller.url, "http://127.0.0.1:9", TOKEN)
        client = KubeClient.from_kubeconfig(str(cluster.kubeconfig))
        actuator = KubernetesActuator(client, NAMESPACE, scraper, ready_timeout_s=20)
        assert await actuator.counts() == {"prefill": 2, "decode": 2}
        took = await carry_out(
            actuator, {"prefill": 2, "decode": 2}, {"prefill": 1, "decode": 3}, bounds, steps.append
        )
        assert await actuator.counts() == {"prefill": 1, "decode": 3}
        mark = len(cluster.requests())
        await carry_out(
            actuator, {"prefill": 1, "decode": 3}, {"prefill": 1, "decode": 1}, bounds, steps.append
        )
    assert len(took) == 2  # 4 in all: prefill-1 out first, then decode-2 in
    assert steps[:2] == ["scaling to 1P+2D", "draining prefill-1"]
    assert controller.terminated == ["prefill-1", "decode-2", "decode-1"]
    assert all(controller.deployed_when_drained.values())  # each drained while its Deployment still existed
    deleted = [name for method, name in cluster.changes_since(mark) if method == "DELETE"]
    assert deleted == ["decode-2", "decode-1"]
    deployments = {name for kind, name in cluster.stored() if kind == "Deployment"}
    assert {"prefill-0", "decode-0", "planner"} <= deployments and "decode-1" not in deployments
    baseline = json.loads(cluster.stored()["ConfigMap", "motor-config"]["data"]["user_config.json"])
    assert (
        baseline["motor_deploy_config"]["p_instances_num"],
        baseline["motor_deploy_config"]["d_instances_num"],
    ) == (
        1,
        1,
    )
