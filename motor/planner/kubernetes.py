"""The planner's Kubernetes scale path (needs the `k8s` extra): the backend's `scale` from the deployed baseline
with the new counts (`motor.deploy.k8s.backend.scale_to`), run with the planner pod's own ServiceAccount
(motor.deploy.k8s.rbac).

Before a step removes instances (the highest indices of a role, as `scale` removes them), each is drained
through the controller: the coordinators stop routing to it and its engine finishes what it serves and stops;
only then is its Deployment deleted. After the step the planner waits until the controller lists every
instance of the new counts active and none of the removed ones."""

import asyncio
import time
from collections.abc import Callable

from motor.config.planner import PLANNED_ROLES
from motor.deploy.errors import DeployError
from motor.deploy.k8s.backend import Applied, deployed_counts, scale_to
from motor.deploy.k8s.client import KubeClient, KubeError, KubeUnavailable
from motor.planner.actuate import STEP_READY_TIMEOUT_S, Counts, ScaleFailed
from motor.planner.scrape import Scraper
from motor.protocol.specs import PlannerSpec

POLL_S = 1.0


def instance_names(counts: Counts) -> list[str]:
    return [f"{role}-{index}" for role in PLANNED_ROLES for index in range(counts[role])]


class KubernetesActuator:
    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        scraper: Scraper,
        ready_timeout_s: float = STEP_READY_TIMEOUT_S,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.scraper = scraper
        self.ready_timeout_s = ready_timeout_s

    @classmethod
    def in_cluster(cls, spec: PlannerSpec, scraper: Scraper) -> "KubernetesActuator":
        assert spec.namespace is not None
        return cls(KubeClient.from_kubeconfig(), spec.namespace, scraper)

    async def counts(self) -> Counts:
        try:
            found = await asyncio.to_thread(deployed_counts, self.client, self.namespace)
        except (DeployError, KubeError, KubeUnavailable) as exc:
            raise ScaleFailed(f"cannot read the deployed counts: {exc}") from exc
        return {role: found.get(role, 0) for role in PLANNED_ROLES}

    async def busy(self) -> str | None:
        return None

    async def scale(self, counts: Counts, progress: Callable[[str], None]) -> None:
        current = await self.counts()
        removed = [name for name in reversed(instance_names(current)) if name not in instance_names(counts)]
        for name in removed:
            progress(f"draining {name}")
            if not await self.scraper.drain(name, "removed by the planner"):
                progress(f"{name} not drained by the controller: its pod drains it when deleted")
        try:
            result = await asyncio.to_thread(scale_to, self.client, self.namespace, dict(counts))
        except (DeployError, KubeError, KubeUnavailable) as exc:
            raise ScaleFailed(str(exc)) from exc
        if isinstance(result, Applied):
            if not result.ok:
                raise ScaleFailed("; ".join(str(failure) for failure in result.result.failures))
            progress(result.summary)
        await self._until_ready(instance_names(counts), removed)

    async def _until_ready(self, wanted: list[str], removed: list[str]) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        while True:
            views = {
                view.instance.id: view.instance.status for view in await self.scraper.refresh_instances()
            }
            waiting = [name for name in wanted if views.get(name) != "active"]
            leaving = [name for name in removed if views.get(name) == "active"]
            if not waiting and not leaving:
                return
            if time.monotonic() > deadline:
                raise ScaleFailed(
                    f"not ready within {self.ready_timeout_s:.0f} s: waiting for {waiting}, still routed: {leaving}"
                )
            await asyncio.sleep(POLL_S)
