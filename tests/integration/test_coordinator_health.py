"""`GET /health` and `GET /version` on the coordinator's API port: 200 only while the dispatch profile's roles
have active instances, 503 with an OpenAI error body naming what is missing otherwise; never counted as
requests and never behind the API key."""

import httpx
import pytest

from motor import __version__
from motor.protocol.instances import Endpoint, Instance
from tests.fixtures.coordinator import StartCoordinator


def instance(role: str, index: int = 0) -> Instance:
    # /health reads the registered set only: the endpoint is never called
    return Instance(
        id=f"{role}-{index}",
        role=role,  # type: ignore[arg-type]
        engine_id=f"{role}-{index}",
        model_name="sim-model",
        endpoints=[Endpoint(host="127.0.0.1", port=9)],
    )


def assert_unavailable(response: httpx.Response, missing: str) -> None:
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    error = response.json()["error"]
    assert error["type"] == "service_unavailable" and error["code"] == "no_instance"
    assert f"no active {missing} instance" in error["message"]


@pytest.mark.parametrize("profile", ["prefill_first", "concurrent"])
async def test_health_follows_the_pd_roles(coordinators: StartCoordinator, profile: str) -> None:
    coordinator = coordinators(
        profile=profile, coordinator_config={"api_key_config": {"enable_api_key": True, "valid_keys": ["k"]}}
    )
    async with httpx.AsyncClient(base_url=coordinator.base_url, timeout=10) as client:
        assert_unavailable(await client.get("/health"), "prefill or decode")
        coordinator.register([instance("prefill")])
        assert_unavailable(await client.get("/health"), "decode")
        coordinator.register([instance("prefill"), instance("decode")])
        healthy = await client.get("/health")
        assert healthy.status_code == 200
        assert healthy.json() == {
            "status": "ok",
            "profile": profile,
            "instances": {"prefill": 1, "decode": 1, "union": 0, "encode": 0},
        }
        coordinator.register([instance("decode")], event="del")
        assert_unavailable(await client.get("/health"), "decode")

        version = await client.get("/version")
        assert version.status_code == 200
        assert version.json() == {"version": __version__, "engine_types": ["sim"]}
        assert (await client.post("/health")).status_code == 405
        assert (await client.get("/v1/models")).status_code == 401  # the API itself still needs the key
    metrics = coordinator.mgmt_get("/metrics")[1]
    assert 'route="health"' not in metrics and 'route="version"' not in metrics


async def test_health_of_an_aggregated_coordinator(coordinators: StartCoordinator) -> None:
    coordinator = coordinators(profile="aggregated")
    async with httpx.AsyncClient(base_url=coordinator.base_url, timeout=10) as client:
        assert_unavailable(await client.get("/health"), "union")
        coordinator.register([instance("union")])
        assert (await client.get("/health")).status_code == 200
