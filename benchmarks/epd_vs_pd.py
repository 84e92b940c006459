"""EPD vs PD for image requests on this machine's vLLM CPU engines, like for like.

Two deployments of the tiny multimodal model (`motor model tiny --multimodal`: a random BLIP-2, the one
architecture of vLLM's CPU build that runs here without torchvision, see docs/epd.md), up at the same time on
the same two cores:
- EPD: examples/local-epd: 1 encode + 1 prefill + 1 decode engine, ECExampleConnector (shared storage) from
  encode to prefill, MultiConnector[MooncakeConnector, MooncakeStoreConnector] and a mooncake_master from
  prefill to decode;
- PD: the same job without the encode instance and without ec_transfer_config: its prefill engine encodes.
Requests alternate between the two coordinators turn by turn, one at a time: streamed chat requests, each with
an image never sent before (a `--image-size` PNG as a data URL, so neither the engines' encoder caches nor the
pool can serve it) and a short text, `--max-tokens` greedy tokens. Per mode the table shows the client's TTFT
and end-to-end time, the coordinator's time per leg (`motor_coordinator_leg_seconds`) and the prefill engine's
own prefill time per request (`vllm:request_prefill_time_seconds`).

    .venv/bin/python benchmarks/epd_vs_pd.py [--requests 40] [--image-size 256] [--max-tokens 16]
        [--plot benchmarks/out/epd_vs_pd.png]

Needs the vllm extra (scripts/setup_dev.sh); its plot the bench extra. Everything listens on 127.0.0.1; `motor
stop` stops both deployments (also on Ctrl-C). About 11 GB of RAM (five engines: 1.35 GiB the encode one, 2.5
GiB each of the others).
"""

import argparse
import base64
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from plotting import default_plot_path, figure, save, skipped_without_matplotlib

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from motor.config import load_config
from motor.config.ports import instance_ports
from motor.runtime.net import free_port_block
from tests.fixtures.local_example import with_ports

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "local-epd"
MODEL_DIR = ".motor/models/tiny-mm"
MOTOR = [sys.executable, "-m", "motor.cli.main"]
TIMEOUT = httpx.Timeout(connect=10, read=300, write=30, pool=300)
MODES = ("EPD", "PD")


@dataclass(frozen=True)
class Deployment:
    mode: str
    job_id: str
    run_root: Path
    api_url: str
    mgmt_url: str
    prefill_url: str
    model: str


@dataclass
class Samples:
    ttft: list[float] = field(default_factory=list)
    e2e: list[float] = field(default_factory=list)
    errors: int = 0


def ec_storage(job_id: str) -> Path:
    return Path(tempfile.gettempdir()) / f"{job_id}-ec"


def epd_config(base: int, job_id: str, encode: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """examples/local-epd with free ports from `base`; without `encode`, its PD twin (no encode instance, no EC
    connector; every other key the same)."""
    user = with_ports(json.loads((EXAMPLE / "user_config.json").read_text()), base)
    env = json.loads((EXAMPLE / "env.json").read_text())
    user["motor_deploy_config"]["job_id"] = job_id
    user["kv_cache_pool_config"].update(port=base + 10, metrics_port=base + 11)
    for section in ("motor_engine_prefill_config", "motor_engine_decode_config"):
        transfer = user[section]["engine_config"]["kv_transfer_config"]["kv_connector_extra_config"]
        transfer["connectors"][0]["kv_port"] = str(base + 24)
    storage = ec_storage(job_id)
    if encode:
        ec = user["motor_engine_encode_config"]["engine_config"]["ec_transfer_config"]
        ec["ec_connector_extra_config"]["shared_storage_path"] = str(storage)
        user["motor_engine_prefill_config"]["engine_config"].pop("ec_transfer_config", None)  # derived
    else:
        user["motor_deploy_config"].pop("e_instances_num", None)
        user.pop("motor_engine_encode_config", None)
        user["motor_engine_prefill_config"]["engine_config"].pop("ec_transfer_config", None)
        env.pop("motor_engine_encode_env", None)
    return user, env


def deploy(workdir: Path, mode: str, base: int) -> Deployment:
    job_id = f"motor-bench-{mode.lower()}"
    user, env = epd_config(base, job_id, encode=mode == "EPD")
    config_dir = workdir / f"config-{mode}"
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "user_config.json").write_text(json.dumps(user, indent=2))
    (config_dir / "env.json").write_text(json.dumps(env, indent=2))
    topology = load_config(config_dir / "user_config.json", config_dir / "env.json")
    api = topology.user.motor_coordinator_config.api_config
    (prefill,) = [p for p in instance_ports(topology.roles) if p.role == "prefill"]
    run_root = workdir / "run"
    with (workdir / f"deploy-{mode}.log").open("wb") as log:
        deployed = subprocess.run(
            [*MOTOR, "deploy", "--config-dir", str(config_dir), "--run-root", str(run_root)],
            cwd=workdir,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=900,
        )
    deployment = Deployment(
        mode,
        job_id,
        run_root,
        f"http://127.0.0.1:{api.coordinator_api_infer_port}",
        f"http://127.0.0.1:{api.coordinator_api_mgmt_port}",
        f"http://127.0.0.1:{prefill.engine_port}",
        user["motor_engine_prefill_config"]["engine_config"]["served_model_name"],
    )
    if deployed.returncode != 0:
        stop(deployment)
        raise SystemExit(
            f"motor deploy ({mode}) failed:\n{(workdir / f'deploy-{mode}.log').read_text()[-3000:]}"
        )
    return deployment


def stop(deployment: Deployment) -> None:
    subprocess.run(
        [*MOTOR, "stop", "--job-id", deployment.job_id, "--run-root", str(deployment.run_root)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=180,
    )


# ---- load --------------------------------------------------------------------------------------------------


def fresh_image(index: int, size: int) -> str:
    """A data URL of a noisy PNG no request used before (the noise keeps PNG compression from shrinking it)."""
    from PIL import Image

    pixels = os.urandom(size * size * 3)
    buffer = io.BytesIO()
    Image.frombytes("RGB", (size, size), pixels).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def body(model: str, index: int, args: argparse.Namespace) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": fresh_image(index, args.image_size)}},
                    {"type": "text", "text": f"Describe picture {index} in a few words."},
                ],
            }
        ],
        "max_tokens": args.max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
    }


def one_request(
    client: httpx.Client, deployment: Deployment, index: int, args: argparse.Namespace, samples: Samples
) -> None:
    payload = body(deployment.model, index, args)
    started = time.perf_counter()
    first: float | None = None
    try:
        with client.stream("POST", f"{deployment.api_url}/v1/chat/completions", json=payload) as response:
            if response.status_code != 200:
                response.read()
                samples.errors += 1
                return
            for line in response.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    samples.errors += 1
                    return
                delta = chunk["choices"][0]["delta"] if chunk.get("choices") else {}
                if first is None and delta.get("content"):
                    first = time.perf_counter()
    except httpx.HTTPError:
        samples.errors += 1
        return
    if first is None:
        samples.errors += 1
        return
    samples.ttft.append(first - started)
    samples.e2e.append(time.perf_counter() - started)


def histogram_totals(url: str, name: str, labels: str = "") -> tuple[float, float]:
    """(sum, count) of a histogram at url/metrics, over the series whose labels contain `labels`."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    total = count = 0.0
    for line in text.splitlines():
        if line.startswith(f"{name}_sum") and labels in line:
            total += float(line.rsplit(" ", 1)[1])
        elif line.startswith(f"{name}_count") and labels in line:
            count += float(line.rsplit(" ", 1)[1])
    return total, count


def per_request(before: tuple[float, float], after: tuple[float, float]) -> float | None:
    count = after[1] - before[1]
    return (after[0] - before[0]) / count if count else None


LEGS = ("encode", "prefill", "kv_wait", "decode")
PREFILL_TIME = "vllm:request_prefill_time_seconds"


def snapshot(deployment: Deployment) -> dict[str, tuple[float, float]]:
    figures = {
        leg: histogram_totals(deployment.mgmt_url, "motor_coordinator_leg_seconds", f'leg="{leg}"')
        for leg in LEGS
    }
    figures["engine prefill"] = histogram_totals(deployment.prefill_url, PREFILL_TIME)
    return figures


# ---- report ------------------------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def milliseconds(value: float | None) -> str:
    return "—" if value is None else f"{value * 1000:.0f}"


def report(
    samples: dict[str, Samples], legs: dict[str, dict[str, float | None]], args: argparse.Namespace
) -> None:
    print(
        f"\n{args.requests} streamed image requests per mode ({args.image_size}x{args.image_size} PNG, "
        f"{args.max_tokens} tokens), alternating one at a time; load average {os.getloadavg()[0]:.1f}"
    )
    header = (
        "| mode | ok | errors | TTFT P50 | TTFT P90 | e2e P50 | "
        + " | ".join(f"{name} leg" for name in LEGS)
        + " | prefill engine |"
    )
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for mode in MODES:
        s = samples[mode]
        ttft = (
            (milliseconds(statistics.median(s.ttft)), milliseconds(percentile(s.ttft, 0.9)))
            if s.ttft
            else ("—", "—")
        )
        e2e = milliseconds(statistics.median(s.e2e)) if s.e2e else "—"
        per_leg = " | ".join(milliseconds(legs[mode][leg]) for leg in LEGS)
        print(
            f"| {mode} | {len(s.ttft)} | {s.errors} | {ttft[0]} | {ttft[1]} | {e2e} | {per_leg} | "
            f"{milliseconds(legs[mode]['engine prefill'])} |"
        )
    print("(times in ms; legs and the prefill engine's time are means per request)")


@skipped_without_matplotlib
def plot(samples: dict[str, Samples], path: Path) -> None:
    fig, axes = figure(1, 2, width=5.0, height=3.6)
    for axis, metric in zip(axes[0], ("ttft", "e2e"), strict=True):
        axis.boxplot(
            [[v * 1000 for v in getattr(samples[mode], metric)] for mode in MODES], tick_labels=list(MODES)
        )
        axis.set_ylabel("ms")
        axis.set_title("TTFT" if metric == "ttft" else "end to end")
    fig.suptitle("EPD vs PD, image requests, vLLM CPU (2 cores)")
    save(fig, path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=40, help="per mode")
    parser.add_argument("--image-size", type=int, default=256)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=3, help="requests per mode before measuring")
    parser.add_argument("--plot", type=Path, default=default_plot_path("epd_vs_pd"))
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="motor-epd-bench-"))
    subprocess.run([*MOTOR, "model", "tiny", "--multimodal", MODEL_DIR], cwd=workdir, check=True, timeout=300)
    base = free_port_block(64)
    deployments: dict[str, Deployment] = {}
    try:
        started = time.monotonic()
        for index, mode in enumerate(MODES):
            deployments[mode] = deploy(workdir, mode, base + 32 * index)
        print(f"deployed EPD and PD in {time.monotonic() - started:.0f} s", flush=True)
        samples = {mode: Samples() for mode in MODES}
        with httpx.Client(timeout=TIMEOUT) as client:
            for index in range(args.warmup):
                for mode in MODES:
                    one_request(client, deployments[mode], -1 - index, args, Samples())
            before = {mode: snapshot(deployments[mode]) for mode in MODES}
            for index in range(args.requests):
                order = MODES if index % 2 == 0 else MODES[::-1]
                for mode in order:
                    one_request(client, deployments[mode], index * 2 + MODES.index(mode), args, samples[mode])
            after = {mode: snapshot(deployments[mode]) for mode in MODES}
        legs = {
            mode: {key: per_request(before[mode][key], after[mode][key]) for key in before[mode]}
            for mode in MODES
        }
        report(samples, legs, args)
        plot(samples, args.plot)
    finally:
        for deployment in deployments.values():
            stop(deployment)
        shutil.rmtree(ec_storage("motor-bench-epd"), ignore_errors=True)  # ECExampleConnector never deletes
    return 0


if __name__ == "__main__":
    sys.exit(main())
