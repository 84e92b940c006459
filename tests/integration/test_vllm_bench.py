"""The ecosystem's load tool against motor: vLLM's `vllm bench serve` (shipped with the CPU build, run through
`python -m motor.engine.vllm_bench`) drives examples/sim through the coordinator, on the completions and the chat
endpoint, with the tiny model's tokenizer (built offline), and completes every request without a failure."""

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.control import LocalRun
from tests.installs import needs_vllm

pytestmark = [
    pytest.mark.slow,
    needs_vllm,
]

PROMPTS = 24
BENCH_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny") / "tiny"
    built = subprocess.run(
        [sys.executable, "-m", "motor.cli.main", "model", "tiny", str(out)],
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    return out


def bench(run: LocalRun, tokenizer: Path, result_dir: Path, backend: str, endpoint: str) -> dict[str, object]:
    name = f"{backend}.json"
    finished = subprocess.run(
        [
            sys.executable,
            "-m",
            "motor.engine.vllm_bench",
            "--backend",
            backend,
            "--base-url",
            run.api_url,
            "--endpoint",
            endpoint,
            "--model",
            "sim-model",
            "--tokenizer",
            str(tokenizer),
            "--dataset-name",
            "random",
            "--random-input-len",
            "64",
            "--random-output-len",
            "16",
            "--num-prompts",
            str(PROMPTS),
            "--max-concurrency",
            "8",
            "--seed",
            "0",
            "--ignore-eos",  # every answer is exactly --random-output-len tokens
            "--save-result",
            "--result-dir",
            str(result_dir),
            "--result-filename",
            name,
        ],
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=BENCH_TIMEOUT_S,
    )
    assert finished.returncode == 0, finished.stdout[-3000:] + finished.stderr[-3000:]
    assert "Serving Benchmark Result" in finished.stdout, finished.stdout[-3000:]
    return json.loads((result_dir / name).read_text())


def test_vllm_bench_serve_through_the_coordinator(
    local_run: Callable[..., LocalRun], tokenizer_dir: Path, tmp_path: Path
) -> None:
    run = local_run()
    assert run.plan_and_deploy() == 0
    for backend, endpoint in (("openai", "/v1/completions"), ("openai-chat", "/v1/chat/completions")):
        result = bench(run, tokenizer_dir, tmp_path, backend, endpoint)
        assert result["completed"] == PROMPTS, (backend, result)
        assert result["failed"] == 0, (backend, result)
        assert result["total_output_tokens"] == PROMPTS * 16, (backend, result)
