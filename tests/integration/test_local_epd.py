"""EPD on the local backend: examples/sim with 2 encode instances beside 1 prefill and 1 decode, deployed as
`motor deploy` does (real mooncake_master, controller, coordinator, node managers, sim engines whose
ec_transfer_config motor filled per role). An image request is encoded on one encode instance, whose output the
prefill engine must find (the sim's consumer fails the request when it is missing), then its KV goes to the
decode engine; a text request never reaches an encode instance; with an encode engine killed under image load
every request is answered through the other one."""

import io
import json
import os
import re
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from motor.cli import local_status
from tests.fixtures.control import LocalRun, pid_alive
from tests.fixtures.coordinator import metric_at
from tests.fixtures.epd import SIM_BLOCK_SIZE, sim_epd_overrides, sim_image_chat
from tests.fixtures.kv_handover import assert_kv_handover, decode_counters

pytestmark = pytest.mark.slow

SAVED = "motor_sim_ec_saved_total"
LOADED = "motor_sim_ec_loaded_total"
MISSING = "motor_sim_ec_missing_total"
ENCODES = ("encode-0", "encode-1")


def engine_urls(run: LocalRun) -> dict[str, str]:
    """Every registered instance's engine URL, as the coordinator has it."""
    instances = httpx.get(f"{run.mgmt_url}/instances", timeout=10).json()["instances"]
    return {i["id"]: f"http://{i['endpoints'][0]['host']}:{i['endpoints'][0]['port']}" for i in instances}


def counts(urls: dict[str, str], name: str) -> dict[str, float]:
    return {instance: metric_at(url, name) for instance, url in urls.items()}


def encode_engine_pid(run: LocalRun, url: str) -> int:
    """encode-0's sim engine: the child of the engine server its node manager recorded, checked by its command
    line (the simulator as an EC producer on encode-0's port) so the kill cannot hit another process."""
    wrapper = json.loads((run.run_dir / "encode-0" / "engine.pid").read_text())["pid"]
    (engine,) = Path(f"/proc/{wrapper}/task/{wrapper}/children").read_text().split()
    argv = Path(f"/proc/{engine}/cmdline").read_bytes().decode().split("\0")
    ec = json.loads(argv[argv.index("--ec-transfer-config") + 1])
    assert "motor.engine.sim" in argv and ec["ec_role"] == "ec_producer", argv
    assert url.endswith(f":{argv[argv.index('--port') + 1]}"), (url, argv)
    return int(engine)


@pytest.fixture
def epd_run(local_run, tmp_path: Path) -> LocalRun:
    run = local_run(overrides=sim_epd_overrides(tmp_path / "ec"))
    assert run.plan_and_deploy() == 0
    return run


def test_an_image_request_is_encoded_once_and_its_output_found_by_the_prefill(epd_run: LocalRun) -> None:
    urls = engine_urls(epd_run)
    assert set(urls) == {"prefill-0", "decode-0", *ENCODES}
    status = io.StringIO()
    assert local_status.status(epd_run.run_root, epd_run.job_id, out=status) == 0
    assert re.search(r"encode\s+0\s+2\s+0", status.getvalue()), status.getvalue()  # 2 active encode instances
    assert "encode-1   encode   active  healthy" in status.getvalue(), status.getvalue()
    before_saved, before_loaded = counts(urls, SAVED), counts(urls, LOADED)
    before_decode = decode_counters(urls["decode-0"])
    prompt_tokens = []
    with httpx.Client(base_url=epd_run.api_url, timeout=60) as client:
        for seed in range(4):
            response = client.post("/v1/chat/completions", json=sim_image_chat(seed))
            assert response.status_code == 200, response.text
            prompt_tokens.append(response.json()["usage"]["prompt_tokens"])
        assert_kv_handover(before_decode, decode_counters(urls["decode-0"]), prompt_tokens, SIM_BLOCK_SIZE)
        text = client.post(
            "/v1/chat/completions",
            json={
                "model": "sim-model",
                "messages": [{"role": "user", "content": "only words"}],
                "max_tokens": 4,
            },
        )
        assert text.status_code == 200, text.text
    saved = {i: counts(urls, SAVED)[i] - before_saved[i] for i in urls}
    loaded = {i: counts(urls, LOADED)[i] - before_loaded[i] for i in urls}
    assert sum(saved[i] for i in ENCODES) == 4 and saved["prefill-0"] == saved["decode-0"] == 0, saved
    assert all(saved[i] > 0 for i in ENCODES), f"the encode legs were not spread by load: {saved}"
    assert loaded["prefill-0"] == 4 and sum(loaded.values()) == 4, loaded
    assert counts(urls, MISSING)["prefill-0"] == 0


def test_an_encode_engine_killed_under_image_load_loses_no_request(epd_run: LocalRun) -> None:
    engine_pid = encode_engine_pid(epd_run, engine_urls(epd_run)["encode-0"])
    statuses: list[int | str] = []
    stop = threading.Event()

    def load() -> None:
        with httpx.Client(base_url=epd_run.api_url, timeout=30) as client:
            seed = 100
            while not stop.is_set():
                seed += 1
                try:
                    statuses.append(
                        client.post("/v1/chat/completions", json=sim_image_chat(seed)).status_code
                    )
                except httpx.HTTPError as exc:  # a hang or a cut connection fails the test below
                    statuses.append(type(exc).__name__)

    workers = [threading.Thread(target=load) for _ in range(3)]
    for worker in workers:
        worker.start()
    time.sleep(1.5)
    os.kill(engine_pid, signal.SIGKILL)
    time.sleep(4.0)
    stop.set()
    for worker in workers:
        worker.join(timeout=40)
    assert not any(worker.is_alive() for worker in workers), "a request hung"
    assert not pid_alive(engine_pid)
    assert len(statuses) > 20 and set(statuses) == {200}, statuses
