"""One look at the cluster: the instances from the controller's API (never from the config), then at once the
coordinator's `/metrics` and `/instances` and every listed engine's `/metrics`. Whatever does not answer in
time is left out of the reading; nothing here raises for a component that is down. The same link to the
controller drains an instance (`POST /controller/terminate_instance`) before a Kubernetes scale removes it."""

import asyncio
import json
import logging
import time
from typing import Any

import aiohttp
from pydantic import ValidationError

from motor.observability.traffic import CoordinatorSample, parse_sample
from motor.planner.readings import EngineReading, Reading, engine_reading, measured_prefill_rates
from motor.protocol.controller import ControllerState, InstanceView, TerminateRequest, bearer

log = logging.getLogger(__name__)

TIMEOUT_S = 2.0
DRAIN_TIMEOUT_S = 30.0  # the controller answers once the node manager stopped its engine (25 s grace)


class Scraper:
    def __init__(
        self, session: aiohttp.ClientSession, controller_url: str, coordinator_mgmt_url: str, token: str
    ) -> None:
        self._session = session
        self._controller_url = controller_url
        self._coordinator_url = coordinator_mgmt_url
        self._token = token
        self.instances: list[InstanceView] = []  # as the controller last listed them

    async def read(self) -> Reading:
        await self.refresh_instances()
        engines = [view for view in self.instances if view.instance.status == "active"]
        coordinator, load, *pages = await asyncio.gather(
            self._text(f"{self._coordinator_url}/metrics"),
            self._json(f"{self._coordinator_url}/instances"),
            *(self._text(f"{view.instance.endpoints[0].base_url}/metrics") for view in engines),
        )
        readings: dict[str, EngineReading] = {}
        for view, page in zip(engines, pages, strict=True):
            reading = engine_reading(view.instance.role, page) if page is not None else None
            if reading is not None:
                readings[view.instance.id] = reading
        at = time.monotonic()
        return Reading(
            at=at,
            coordinator=_coordinator_sample(coordinator, at),
            engines=readings,
            prefill_rates=measured_prefill_rates(load) if load is not None else {},
        )

    async def refresh_instances(self) -> list[InstanceView]:
        """The instances as the controller lists them now (as last listed when it does not answer)."""
        views = await self._instances()
        if views is not None:
            self.instances = views
        return self.instances

    async def drain(self, instance_id: str, reason: str) -> bool:
        """Terminate an instance through the controller: the coordinators stop routing to it, its engine
        finishes what it serves and stops. False when the controller did not do it."""
        request = TerminateRequest(instance_id=instance_id, reason=reason)
        try:
            async with self._session.post(
                f"{self._controller_url}/controller/terminate_instance",
                json=request.model_dump(),
                headers=bearer(self._token),
                timeout=aiohttp.ClientTimeout(total=DRAIN_TIMEOUT_S),
            ) as answer:
                if answer.status == 200:
                    return True
                log.warning(
                    "the controller refused to drain %s: HTTP %d %s",
                    instance_id,
                    answer.status,
                    await answer.text(),
                )
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("cannot drain %s through the controller: %s", instance_id, exc)
        return False

    async def _instances(self) -> list[InstanceView] | None:
        body = await self._json(f"{self._controller_url}/controller/instances", headers=bearer(self._token))
        if body is None:
            return None
        try:
            return ControllerState.model_validate(body).instances
        except ValidationError as exc:
            log.warning("unexpected answer from the controller: %s", exc.errors()[0]["msg"])
            return None

    async def _text(self, url: str, headers: dict[str, str] | None = None) -> str | None:
        try:
            async with self._session.get(
                url, headers=headers, timeout=aiohttp.ClientTimeout(total=TIMEOUT_S)
            ) as answer:
                if answer.status != 200:
                    log.debug("%s answered HTTP %d", url, answer.status)
                    return None
                return await answer.text()
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.debug("cannot read %s: %s", url, exc)
            return None

    async def _json(self, url: str, headers: dict[str, str] | None = None) -> Any:
        text = await self._text(url, headers)
        if text is None:
            return None
        try:
            return json.loads(text)
        except ValueError:
            return None


def _coordinator_sample(text: str | None, at: float) -> CoordinatorSample | None:
    if text is None:
        return None
    try:
        return parse_sample(text, at)
    except ValueError:
        return None
