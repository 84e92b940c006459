"""Attacks on the control plane, run against real processes (controller, node manager, sim engine): each must
fail. A forged registration, token theft from an engine's /proc/<pid>/environ, SSRF through a registered
address, and the simulator's fault API without its token."""

import asyncio
from collections.abc import Callable
from pathlib import Path

import httpx
from aiohttp import web

from motor.protocol.controller import ControllerState, bearer
from motor.protocol.credentials import instance_credential
from motor.protocol.node_manager import NodeManagerStatus
from motor.runtime.net import free_port_block
from tests.fixtures.control import TOKEN, ConfigPair, ControlPlane, RefreshRecorder, sim_config
from tests.fixtures.sim import SIM_ADMIN, SIM_ADMIN_TOKEN, StartSimEngine
from tests.integration.test_controller_lifecycle import credential, registration

STOLEN_CREDENTIAL = credential("prefill-0")  # what a compromised prefill-0 node manager holds
CLOUD_SECRET = "cloud-secret-value"


async def controller_with(
    tmp_path: Path, control_plane: ControlPlane, recorder: RefreshRecorder
) -> tuple[ConfigPair, httpx.AsyncClient]:
    config = sim_config(tmp_path / "config", pool=False)
    control_plane.controller(config, coordinators=recorder.url)
    return config, httpx.AsyncClient(base_url=config.controller_url, timeout=10)


async def listed(client: httpx.AsyncClient) -> set[str]:
    response = await client.get("/controller/instances", headers=bearer(TOKEN))
    return {view.instance.id for view in ControllerState.model_validate(response.json()).instances}


async def test_one_instance_credential_cannot_take_over_another_instance(
    tmp_path: Path, control_plane: ControlPlane, refresh_recorder: Callable[..., RefreshRecorder]
) -> None:
    recorder = refresh_recorder()
    await recorder.start()
    config, client = await controller_with(tmp_path, control_plane, recorder)
    async with client:
        decode = registration(config, "decode-0", state="healthy")
        for headers in (STOLEN_CREDENTIAL, bearer(instance_credential("guessed-token", "decode-0"))):
            response = await client.post("/controller/register", json=decode, headers=headers)
            assert response.status_code == 401 and response.json()["error"]["code"] == "invalid_token"
            beat = {"instance_id": "decode-0", "engine_state": "healthy"}
            response = await client.post("/controller/heartbeat", json=beat, headers=headers)
            assert response.status_code == 401
        # a credential is not a token: it lists and terminates nothing
        assert (await client.get("/controller/instances", headers=STOLEN_CREDENTIAL)).status_code == 401
        terminate = {"instance_id": "decode-0", "reason": "attack"}
        response = await client.post(
            "/controller/terminate_instance", json=terminate, headers=STOLEN_CREDENTIAL
        )
        assert response.status_code == 401
        assert await listed(client) == set()
        assert all(not event.instances for event in recorder.events)


async def capture(port: int) -> tuple[web.AppRunner, list[str]]:
    """A listener on 127.0.0.1:`port` recording every request: where an SSRF would land."""
    seen: list[str] = []

    async def record(request: web.Request) -> web.Response:
        seen.append(f"{request.method} {request.path_qs} {request.headers.get('Authorization', '')}")
        return web.json_response({})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, seen


async def test_a_registration_cannot_point_the_controller_or_the_coordinators_elsewhere(
    tmp_path: Path, control_plane: ControlPlane, refresh_recorder: Callable[..., RefreshRecorder]
) -> None:
    recorder = refresh_recorder()
    await recorder.start()
    config, client = await controller_with(tmp_path, control_plane, recorder)
    trap_port = free_port_block(1)  # never inside the config's block, whose ports nothing has bound yet
    runner, seen = await capture(trap_port)
    try:
        async with client:
            genuine = registration(config, "prefill-0", state="healthy")
            engine = genuine["endpoints"][0]
            forged = [
                ("node_manager_url", {"node_manager_url": f"http://127.0.0.1:{trap_port}"}),
                ("node_manager_url", {"node_manager_url": "http://169.254.169.254:80"}),
                ("node_manager_url", {"node_manager_url": f"{genuine['node_manager_url']}/node-manager/x#"}),
                ("endpoints.0.port", {"endpoints": [{**engine, "port": trap_port}]}),
                ("endpoints.0.host", {"endpoints": [{**engine, "host": "10.0.0.1"}]}),
            ]
            for field, changes in forged:
                response = await client.post(
                    "/controller/register", json={**genuine, **changes}, headers=STOLEN_CREDENTIAL
                )
                assert response.status_code == 403, response.text
                error = response.json()["error"]
                assert (error["code"], error["param"]) == ("address_not_allowed", field)
            assert await listed(client) == set()
            response = await client.post(
                "/controller/terminate_instance",
                json={"instance_id": "prefill-0", "reason": "test"},
                headers=bearer(TOKEN),
            )
            assert response.status_code == 404
        await asyncio.sleep(0.5)
        assert seen == []  # the controller never called the trap, with or without a credential
        assert all(not event.instances for event in recorder.events)  # nor told a coordinator to
    finally:
        await runner.cleanup()


def process_tree(root: int) -> list[int]:
    """`root` and every process descending from it (by PPid, whichever thread started it)."""
    parents: dict[int, int] = {}
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue  # it exited meanwhile
        ppid = next(line.split()[1] for line in text.splitlines() if line.startswith("PPid:"))
        parents[int(status.parent.name)] = int(ppid)
    tree = [root]
    for pid in sorted(parents):
        ancestor = parents.get(pid)
        while ancestor is not None and ancestor not in tree:
            ancestor = parents.get(ancestor)
        if ancestor is not None:
            tree.append(pid)
    return tree


def command_of(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def environment_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


async def test_an_engine_cannot_read_motor_credentials_from_its_environment(
    tmp_path: Path, control_plane: ControlPlane, refresh_recorder: Callable[..., RefreshRecorder]
) -> None:
    """Even a node manager started carelessly with the controller token and a cloud secret in its environment
    passes neither to its engine: the engine (and all it starts) sees an allowlist."""
    recorder = refresh_recorder()
    await recorder.start()
    config = sim_config(tmp_path / "config", pool=False)
    control_plane.controller(config, coordinators=recorder.url)
    careless = {"MOTOR_CONTROLLER_TOKEN": TOKEN, "AWS_SECRET_ACCESS_KEY": CLOUD_SECRET}
    control_plane.node_manager(config, "prefill", 0, k=0, env=careless)
    async with httpx.AsyncClient(timeout=5) as client:
        status_url = f"{config.node_manager_url(0)}/node-manager/status"
        async with asyncio.timeout(60):
            while not (
                status := NodeManagerStatus.model_validate((await client.get(status_url)).json())
            ).registered:
                await asyncio.sleep(0.1)
    assert status.engine_pid is not None
    engine_processes = process_tree(status.engine_pid)
    commands = [command_of(pid) for pid in engine_processes]
    # the engine server and the simulator it runs
    assert any("motor.engine.server" in command for command in commands), commands
    assert any("motor.engine.sim" in command for command in commands), commands
    node_manager_credential = instance_credential(TOKEN, "prefill-0")
    for pid in engine_processes:
        environment = environment_of(pid)
        values = set(environment.values())
        assert not {TOKEN, node_manager_credential, CLOUD_SECRET} & values, pid
        assert not any(name.startswith("MOTOR_INSTANCE_CREDENTIAL_") for name in environment), pid
        assert "MOTOR_CONTROLLER_TOKEN" not in environment and "PATH" in environment
        assert environment["MOTOR_SIM_ADMIN_TOKEN"] == SIM_ADMIN_TOKEN  # a credential env.json names passes


async def test_the_simulator_fault_api_needs_its_token(sim_engines: StartSimEngine) -> None:
    armed = sim_engines()
    unarmed = sim_engines(env={"MOTOR_SIM_ADMIN_TOKEN": ""})
    async with httpx.AsyncClient(timeout=10) as client:
        for headers in (
            {},
            {"Authorization": "Bearer wrong"},
            {"Authorization": SIM_ADMIN["Authorization"][7:]},
        ):
            for method in ("GET", "POST"):
                response = await client.request(
                    method, f"{armed.base_url}/admin/faults", json={"error_rate": 1.0}, headers=headers
                )
                assert response.status_code == 401, (method, headers)
        response = await client.post(
            f"{unarmed.base_url}/admin/faults", json={"error_rate": 1.0}, headers=SIM_ADMIN
        )
        assert response.status_code == 403 and "MOTOR_SIM_ADMIN_TOKEN" in response.json()["error"]["message"]
        for engine in (armed, unarmed):  # nothing was injected
            completion = {"model": "sim-model", "prompt": "still served", "max_tokens": 2}
            assert (
                await client.post(f"{engine.base_url}/v1/completions", json=completion)
            ).status_code == 200
