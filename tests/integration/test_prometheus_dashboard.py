"""No blank panel: examples/sim (with an encode instance) deployed locally, scraped by a real Prometheus with the config `motor deploy`
wrote (only the intervals shortened), PD traffic through the coordinator (image requests with their encode leg, streamed and not, an unknown model, a
client that leaves mid-stream, a failing prefill that is retried), then every PromQL query of the generated
dashboard must return at least one finite sample through Prometheus' HTTP API."""

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from motor.cli.main import main
from motor.deploy.prometheus import CONFIG_FILE, PROMETHEUS_DIR
from motor.observability.dashboard import JOB_VARIABLE, RATE_WINDOW, build_dashboard, panel_queries
from tests.fixtures.control import LocalRun
from tests.fixtures.epd import sim_epd_overrides, sim_image_chat
from tests.fixtures.planner import with_planner_port
from tests.fixtures.prometheus import PROMETHEUS, PrometheusServer
from tests.fixtures.sim import SIM_ADMIN
from tests.installs import needs_install

pytestmark = [
    pytest.mark.slow,
    needs_install(
        PROMETHEUS is not None, "Debian's prometheus is not installed: scripts/setup_dev.sh installs it"
    ),
]

PROMPT = " ".join(f"word{i}" for i in range(120))
QUERY_WINDOW = "5m"  # covers the whole test's traffic
DATA_TIMEOUT_S = 60.0


def chat(stream: bool, max_tokens: int = 8, model: str = "sim-model") -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": max_tokens,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def completion(stream: bool) -> dict[str, Any]:
    return {"model": "sim-model", "prompt": PROMPT, "max_tokens": 8, "stream": stream}


def send_traffic(client: httpx.Client) -> None:
    for seed in range(3):
        assert client.post("/v1/chat/completions", json=sim_image_chat(seed)).status_code == 200  # encode leg
        assert client.post("/v1/chat/completions", json=chat(stream=False)).status_code == 200
        assert client.post("/v1/completions", json=completion(stream=False)).status_code == 200
        for path, body in (
            ("/v1/chat/completions", chat(stream=True)),
            ("/v1/completions", completion(True)),
        ):
            with client.stream("POST", path, json=body) as response:
                assert response.status_code == 200
                assert b"[DONE]" in response.read()


def engine_port(run: LocalRun, instance: str) -> int:
    return next(c["ports"]["engine"] for c in run.state()["components"] if c["name"] == instance)


def dashboard_expr(expr: str, job_id: str) -> str:
    return expr.replace(f"${JOB_VARIABLE}", job_id).replace(RATE_WINDOW, QUERY_WINDOW)


def finite_samples(result: list[dict[str, Any]]) -> int:
    return sum(1 for series in result if math.isfinite(float(series["value"][1])))


def test_every_dashboard_query_returns_data(
    local_run: Callable[..., LocalRun],
    prometheus_servers: Callable[..., PrometheusServer],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    retries = {"motor_coordinator_config": {"exception_config": {"max_retry": 1, "retry_delay": 0.05}}}
    planner = {
        "motor_planner_config": {"enable": True, "max_instances": 2, "interval_s": 1.0, "window_s": 5.0}
    }
    run = with_planner_port(
        local_run(overrides={**retries, **planner, **sim_epd_overrides(tmp_path / "ec", encodes=1)})
    )
    assert run.plan_and_deploy() == 0

    capsys.readouterr()
    assert main(["prometheus-config", "--job-id", run.job_id, "--run-root", str(run.run_root)]) == 0
    written = yaml.safe_load(capsys.readouterr().out)
    assert written == yaml.safe_load((run.run_dir / PROMETHEUS_DIR / CONFIG_FILE).read_text())
    written["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump(written))
    server = prometheus_servers(config=config)
    # pool, controller, coordinator, planner (its bounds hold 1P + 1D), and an engine and a node manager per
    # instance (1E + 1P + 1D)
    targets = server.wait_targets_up(expected=10)
    assert {(t["labels"]["job"], t["labels"]["instance"]) for t in targets} == {
        ("motor-kv-pool", "kv-pool"),
        ("motor-controller", "controller"),
        ("motor-coordinator", "coordinator"),
        ("motor-planner", "planner"),
        ("motor-engine", "prefill-0"),
        ("motor-engine", "decode-0"),
        ("motor-node-manager", "prefill-0"),
        ("motor-node-manager", "decode-0"),
        ("motor-engine", "encode-0"),
        ("motor-node-manager", "encode-0"),
    }
    assert all(t["labels"]["motor_job"] == run.job_id for t in targets)

    with httpx.Client(base_url=run.api_url, timeout=60) as client:
        send_traffic(client)
        unknown = client.post("/v1/chat/completions", json=chat(stream=False, model="no-such-model"))
        assert unknown.status_code == 404
        # a client that goes away mid-stream: the coordinator cancels the decode leg
        with client.stream(
            "POST", "/v1/chat/completions", json=chat(stream=True, max_tokens=2000)
        ) as response:
            assert response.status_code == 200
            next(response.iter_bytes())
        # a prefill engine failing every request: the leg is retried, then the client gets a 5xx
        faults = f"http://127.0.0.1:{engine_port(run, 'prefill-0')}/admin/faults"
        assert httpx.post(faults, json={"error_rate": 1.0}, headers=SIM_ADMIN).status_code == 200
        assert client.post("/v1/chat/completions", json=chat(stream=False)).status_code >= 500
        assert httpx.post(faults, json={"error_rate": 0.0}, headers=SIM_ADMIN).status_code == 200
        send_traffic(client)

    queries = panel_queries(build_dashboard())
    missing: list[tuple[str, str]] = []
    for _ in range(int(DATA_TIMEOUT_S)):
        missing = [
            (title, expr)
            for title, expr in queries
            if not finite_samples(server.query(dashboard_expr(expr, run.job_id)))
        ]
        if not missing:
            break
        time.sleep(1)
    assert missing == [], "panels without data:\n" + "\n".join(f"  {t}: {e}" for t, e in missing)
    assert len(queries) >= 30
