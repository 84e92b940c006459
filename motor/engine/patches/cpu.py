"""Fixes vLLM needs on a machine without accelerators (CPU build of torch and vllm-cpu)."""

import contextlib
import functools
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from motor.engine.patches.facts import ACCELERATOR_INDEX_CALL, Facts, is_cpu_build
from motor.engine.patches.patch import Decision, Patch, PatchTargetError, replace_method

# ---- CUDA builds of torch extensions next to a CPU torch ---------------------------------------------------


def broken_extensions(facts: Facts) -> list[str]:
    """Installed torch extensions built for CUDA while torch is a CPU build: they fail at import."""
    if facts.torch_version is None or not is_cpu_build(facts.torch_version):
        return []
    return sorted(name for name, version in facts.torch_extensions.items() if not is_cpu_build(version))


def decide_extensions(facts: Facts) -> Decision:
    if facts.torch_version is None:
        return Decision(False, "torch is not installed")
    if not is_cpu_build(facts.torch_version):
        return Decision(False, f"torch {facts.torch_version} is not a CPU build; its extensions match it")
    broken = broken_extensions(facts)
    if not broken:
        return Decision(
            False, f"torch {facts.torch_version} is a CPU build and no CUDA-built extension is installed"
        )
    listed = ", ".join(f"{name} {facts.torch_extensions[name]}" for name in broken)
    return Decision(
        True,
        f"torch {facts.torch_version} is a CPU build but {listed} are CUDA builds that fail at import and make "
        "transformers unusable: they are hidden (remove them with scripts/install_vllm_cpu.sh)",
    )


def hide_modules(names: list[str]) -> None:
    # A None entry makes `import name` fail and importlib.util.find_spec(name) return None: "not installed".
    for name in names:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]


# ---- MooncakeConnector asking for the accelerator's device index -------------------------------------------

MOONCAKE_TARGETS = (
    "vllm.distributed.kv_transfer.kv_connector.v1.mooncake.mooncake_connector",
    "vllm.distributed.kv_transfer.kv_connector.v1.mooncake_connector",
)
MOONCAKE_WORKER = "MooncakeConnectorWorker"


def decide_mooncake(facts: Facts) -> Decision:
    if facts.vllm_version is None:
        return Decision(False, "vLLM is not installed")
    if not facts.mooncake_asks_device_index:
        return Decision(
            False, f"vLLM {facts.vllm_version}'s MooncakeConnector does not call {ACCELERATOR_INDEX_CALL}"
        )
    if facts.accelerator_present:
        return Decision(False, "an accelerator is present: the device index exists")
    when = (
        "no accelerator is present" if facts.accelerator_present is False else "if no accelerator is present"
    )
    return Decision(
        True,
        f"vLLM {facts.vllm_version}'s MooncakeConnector worker calls {ACCELERATOR_INDEX_CALL}, which raises when "
        f"no accelerator is present; {when}, device index 0 (the CPU) is used while the worker starts",
    )


@contextlib.contextmanager
def cpu_device_index(accelerator: Any) -> Iterator[None]:
    """While active, `accelerator.current_device_index()` answers 0 when no accelerator is available."""
    original = accelerator.current_device_index

    def current_device_index() -> int:
        return original() if accelerator.is_available() else 0

    accelerator.current_device_index = current_device_index
    try:
        yield
    finally:
        accelerator.current_device_index = original


def apply_mooncake(module: ModuleType | None, _facts: Facts) -> None:
    worker = getattr(module, MOONCAKE_WORKER, None)
    torch = getattr(module, "torch", None)
    if (
        worker is None
        or torch is None
        or not hasattr(getattr(torch, "accelerator", None), "current_device_index")
    ):
        raise PatchTargetError(
            f"{getattr(module, '__name__', module)} has no {MOONCAKE_WORKER} using torch.accelerator"
        )
    original_init = worker.__init__

    @functools.wraps(original_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        with cpu_device_index(torch.accelerator):
            original_init(self, *args, **kwargs)

    replace_method(worker, "__init__", __init__)


BROKEN_TORCH_EXTENSIONS = Patch(
    name="cpu-torch-cuda-extensions",
    summary="hide CUDA builds of torchvision/torchaudio/torchcodec installed next to a CPU torch",
    decide=decide_extensions,
    targets=(),
    apply=lambda _module, facts: hide_modules(broken_extensions(facts)),
)

MOONCAKE_DEVICE_INDEX = Patch(
    name="cpu-mooncake-device-index",
    summary="MooncakeConnector worker uses device index 0 when no accelerator is present",
    decide=decide_mooncake,
    targets=MOONCAKE_TARGETS,
    apply=apply_mooncake,
)
