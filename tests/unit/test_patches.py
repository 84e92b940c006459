import importlib
import importlib.util
import inspect
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from motor.cli.patch import status_report
from motor.engine.patches import connector_metrics, cpu, multi_connector, runtime, shm_spin
from motor.engine.patches.facts import Facts, gather_facts, shm_reader_spins_one_second
from motor.engine.patches.patch import PatchTargetError
from motor.engine.patches.registry import known_patches

VLLM_INSTALLED = importlib.util.find_spec("vllm") is not None
OLD_ASCEND = Facts(vllm_version="0.11.0", vllm_ascend_version="0.11.0rc1")


# ---- gating: pure functions of Facts ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ascend", "applies"),
    [
        (None, False),
        ("0.9.1", True),
        ("0.16.9", True),
        ("0.17.0rc1", True),
        ("0.17.0rc2.dev3", True),  # a development build before rc2
        ("0.17.0rc2", False),
        ("0.17.0", False),
        ("0.18.0rc1", False),
        ("1.0.0", False),
        ("not-a-version", False),
    ],
)
def test_multi_connector_fix_gated_on_vllm_ascend_version(ascend: str | None, applies: bool) -> None:
    decision = multi_connector.decide(Facts(vllm_version="0.11.0", vllm_ascend_version=ascend))
    assert decision.applies is applies
    assert decision.why


def test_multi_connector_fix_needs_vllm_itself() -> None:
    decision = multi_connector.decide(Facts(vllm_version=None, vllm_ascend_version="0.16.0"))
    assert not decision.applies
    assert "not installed" in decision.why


def test_cuda_extensions_hidden_only_next_to_a_cpu_torch() -> None:
    broken = Facts(
        torch_version="2.13.0+cpu", torch_extensions={"torchvision": "0.29.0", "torchaudio": "2.11.1"}
    )
    decision = cpu.decide_extensions(broken)
    assert decision.applies
    assert "torchvision 0.29.0" in decision.why
    assert cpu.broken_extensions(broken) == ["torchaudio", "torchvision"]

    matching = Facts(torch_version="2.13.0+cpu", torch_extensions={"torchvision": "0.29.0+cpu"})
    assert not cpu.decide_extensions(matching).applies
    assert not cpu.decide_extensions(
        Facts(torch_version="2.13.0", torch_extensions={"torchvision": "0.29.0"})
    ).applies
    assert not cpu.decide_extensions(Facts(torch_version=None)).applies
    assert not cpu.decide_extensions(Facts(torch_version="2.13.0+cpu")).applies


@pytest.mark.parametrize(
    ("asks", "accelerator", "applies"),
    [(True, False, True), (True, None, True), (True, True, False), (False, False, False)],
)
def test_mooncake_fix_gated_on_accelerator_and_vllm_code(
    asks: bool, accelerator: bool | None, applies: bool
) -> None:
    facts = Facts(vllm_version="0.32.0", accelerator_present=accelerator, mooncake_asks_device_index=asks)
    assert cpu.decide_mooncake(facts).applies is applies
    assert not cpu.decide_mooncake(Facts(vllm_version=None, mooncake_asks_device_index=True)).applies


def test_metrics_fix_gated_on_vllm_code() -> None:
    assert connector_metrics.decide(
        Facts(vllm_version="0.32.0", multi_connector_asserts_metrics=True)
    ).applies
    assert not connector_metrics.decide(Facts(vllm_version="0.33.0")).applies
    assert not connector_metrics.decide(Facts()).applies


def test_push_producers_are_put_senders_on_a_producer_side() -> None:
    configs = [
        {"kv_connector": "MooncakeLayerwiseConnector", "kv_connector_extra_config": {"send_type": "PUT"}},
        {"kv_connector": "AscendStoreConnector", "kv_role": "kv_producer"},
        {
            "kv_connector": "X",
            "kv_role": "kv_consumer",
            "kv_connector_extra_config": {"send_type": "PUT_ASYNC"},
        },
        {"kv_connector": "Y", "kv_role": "kv_both", "kv_connector_extra_config": {"send_type": "put_async"}},
        {"kv_connector": "Z", "kv_connector_extra_config": {"send_type": "GET"}},
    ]
    assert multi_connector.push_producer_indices(configs, "kv_producer") == {0, 3}
    assert multi_connector.push_producer_indices(configs, "kv_consumer") == {3}


def test_status_report_names_every_fix_and_its_reason() -> None:
    report = status_report(OLD_ASCEND)
    for patch in known_patches():
        assert patch.name in report
    assert "multi-connector-push-blocks: APPLIES" in report
    assert "0.11.0rc1 < 0.17.0rc2" in report
    assert (
        "  for:  MooncakeLayerwiseConnector\n" in report
    )  # the connector specs name the patches that fix them


def test_gathered_facts_describe_this_interpreter() -> None:
    facts = gather_facts()
    assert (facts.vllm_version is not None) == VLLM_INSTALLED
    if facts.vllm_version == "0.32.0":
        assert facts.shm_reader_spins_one_second, "vLLM 0.32's SpinCondition readers spin for 1 s"


@pytest.mark.parametrize(("accelerator", "applies"), [(False, True), (None, True), (True, False)])
def test_shm_busy_sleep_fix_only_on_cpu_engines(accelerator: bool | None, applies: bool) -> None:
    facts = Facts(vllm_version="0.32.0", accelerator_present=accelerator, shm_reader_spins_one_second=True)
    decision = shm_spin.decide(facts)
    assert decision.applies is applies and decision.why
    assert not shm_spin.decide(Facts(vllm_version="0.33.0", accelerator_present=False)).applies
    assert not shm_spin.decide(Facts(shm_reader_spins_one_second=True)).applies


SPINNING_SOURCE = """
class SpinCondition:
    def __init__(self, is_reader: bool, context, notify_address: str, busy_loop_s: float = 1,
    ):
        ...
        if current_time <= self.last_read + self.busy_loop_s:
            sched_yield()
"""


@pytest.mark.parametrize(
    ("source", "spins"),
    [
        (SPINNING_SOURCE, True),
        (SPINNING_SOURCE.replace("float = 1,", "float = 1.0)"), True),
        (SPINNING_SOURCE.replace("float = 1,", "float = 0.002,"), False),
        (SPINNING_SOURCE.replace("float = 1,", "float = 10,"), False),
        (SPINNING_SOURCE.replace("sched_yield()", "time.sleep(0)"), False),
        (SPINNING_SOURCE + "envs.VLLM_SHM_BROADCAST_BUSY_LOOP_S", False),  # made configurable upstream
        (SPINNING_SOURCE + "envs.VLLM_SHM_BROADCAST_BUSY_SLEEP_S", False),
        ("", False),
    ],
)
def test_shm_spin_read_from_the_installed_source(source: str, spins: bool) -> None:
    assert shm_reader_spins_one_second(source) is spins


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(None, shm_spin.DEFAULT_SLEEP_S), ("0", 0.0), ("0.001", 0.001), ("-1", shm_spin.DEFAULT_SLEEP_S),
     ("inf", shm_spin.DEFAULT_SLEEP_S), ("nan", shm_spin.DEFAULT_SLEEP_S), ("soon", shm_spin.DEFAULT_SLEEP_S)],
)  # fmt: skip
def test_shm_busy_sleep_from_the_environment(value: str | None, seconds: float) -> None:
    environ = {} if value is None else {shm_spin.SLEEP_ENV: value}
    assert shm_spin.busy_sleep_seconds(environ) == seconds


# ---- the MultiConnector monkeypatch --------------------------------------------------------------------------


class RecordingConnector:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, int]] = []

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        self.calls.append((blocks, num_external_tokens))


def multi_connector_class() -> tuple[type, Any, Any]:
    """(MultiConnector class, allocated blocks, their empty twin): vLLM's own when installed, else a stand-in."""
    if VLLM_INSTALLED:
        from vllm.distributed.kv_transfer.kv_connector.v1.multi_connector import MultiConnector
        from vllm.v1.core.kv_cache_manager import KVCacheBlocks
        from vllm.v1.core.kv_cache_utils import KVCacheBlock

        blocks = KVCacheBlocks(([KVCacheBlock(3), KVCacheBlock(4)],))
        return MultiConnector, blocks, blocks.new_empty()

    class Blocks(tuple):
        def new_empty(self) -> "Blocks":
            return Blocks()

    class StandInMultiConnector:
        """Shaped like vLLM's MultiConnector before the fix: only the chosen connector gets blocks."""

        def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
            chosen = self._requests_to_connector.get(request.request_id, -1)
            for index, connector in enumerate(self._connectors):
                if index == chosen:
                    connector.update_state_after_alloc(request, blocks, num_external_tokens)
                else:
                    connector.update_state_after_alloc(request, blocks.new_empty(), 0)

    return StandInMultiConnector, Blocks((3, 4)), Blocks()


def make_connector(cls: type, sub_configs: list[dict[str, Any]], chosen: int) -> Any:
    connector = object.__new__(cls)
    connector._connectors = [RecordingConnector() for _ in sub_configs]
    connector._requests_to_connector = {"req-1": chosen}
    extra = {"connectors": sub_configs}
    connector._vllm_config = SimpleNamespace(
        kv_transfer_config=SimpleNamespace(kv_role="kv_producer", kv_connector_extra_config=extra)
    )
    return connector


def test_multi_connector_patch_forwards_blocks_to_push_producers(monkeypatch: pytest.MonkeyPatch) -> None:
    cls, blocks, empty = multi_connector_class()
    monkeypatch.setattr(cls, "update_state_after_alloc", cls.update_state_after_alloc)  # restored afterwards
    configs = [
        {"kv_connector": "MooncakeLayerwiseConnector", "kv_connector_extra_config": {"send_type": "PUT"}},
        {"kv_connector": "AscendStoreConnector"},
        {"kv_connector": "OtherConnector"},
    ]
    request = SimpleNamespace(request_id="req-1")

    module = sys.modules[cls.__module__] if VLLM_INSTALLED else SimpleNamespace(MultiConnector=cls)
    multi_connector.apply(module, OLD_ASCEND)  # type: ignore[arg-type]
    assert getattr(cls.update_state_after_alloc, "__motor_patched__", False)

    connector = make_connector(cls, configs, chosen=1)
    connector.update_state_after_alloc(request, blocks, 32)
    pusher, store, other = connector._connectors
    assert store.calls == [(blocks, 32)], "the chosen connector loads the external tokens"
    assert pusher.calls == [(blocks, 0)], "the push producer learns the request's real blocks"
    assert other.calls == [(empty, 0)]

    # Applying twice changes nothing.
    patched = cls.update_state_after_alloc
    multi_connector.apply(module, OLD_ASCEND)  # type: ignore[arg-type]
    assert cls.update_state_after_alloc is patched


def test_multi_connector_patch_refuses_an_unexpected_target() -> None:
    with pytest.raises(PatchTargetError, match="MultiConnector"):
        multi_connector.apply(SimpleNamespace(), OLD_ASCEND)  # type: ignore[arg-type]


# ---- CPU fixes -----------------------------------------------------------------------------------------------


def test_cpu_device_index_answers_zero_without_an_accelerator() -> None:
    def no_device() -> int:
        raise RuntimeError("Cannot access accelerator device when none is available")

    accelerator = SimpleNamespace(is_available=lambda: False, current_device_index=no_device)
    with cpu.cpu_device_index(accelerator):
        assert accelerator.current_device_index() == 0
    with pytest.raises(RuntimeError):
        accelerator.current_device_index()

    present = SimpleNamespace(is_available=lambda: True, current_device_index=lambda: 5)
    with cpu.cpu_device_index(present):
        assert present.current_device_index() == 5


def test_shm_busy_sleep_patch_makes_the_polls_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    """The patch swaps the module-level sched_yield that SpinCondition.wait and acquire_write call per poll."""
    yielded: list[str] = []
    module = SimpleNamespace(SpinCondition=object, sched_yield=lambda: yielded.append("yield"))
    monkeypatch.setenv(shm_spin.SLEEP_ENV, "0.002")
    shm_spin.apply(module, Facts())  # type: ignore[arg-type]
    started = time.perf_counter()
    module.sched_yield()
    assert time.perf_counter() - started >= 0.002 and yielded == []
    patched = module.sched_yield
    shm_spin.apply(module, Facts())  # type: ignore[arg-type]
    assert module.sched_yield is patched, "applying twice changes nothing"

    monkeypatch.setenv(shm_spin.SLEEP_ENV, "0")
    untouched = SimpleNamespace(SpinCondition=object, sched_yield=lambda: yielded.append("yield"))
    shm_spin.apply(untouched, Facts())  # type: ignore[arg-type]
    untouched.sched_yield()
    assert yielded == ["yield"], "0 keeps vLLM's sched_yield"
    with pytest.raises(PatchTargetError, match="SpinCondition"):
        shm_spin.apply(SimpleNamespace(), Facts())  # type: ignore[arg-type]


def test_shm_busy_sleep_patch_fits_the_installed_vllm() -> None:
    """The pinned vLLM CPU build (scripts/setup_dev.sh installs it) spins for 1 s; an upgrade that stops doing so
    fails here, which is the signal to retire the patch rather than to let it silently stop applying."""
    from vllm.distributed.device_communicators import shm_broadcast

    facts = gather_facts()
    assert facts.shm_reader_spins_one_second, f"vLLM {facts.vllm_version} no longer spins for 1 s"
    assert callable(shm_broadcast.sched_yield) and hasattr(shm_broadcast, "SpinCondition")
    assert "sched_yield()" in inspect.getsource(shm_broadcast.SpinCondition.wait)


def test_hidden_modules_look_uninstalled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "json", raising=False)
    cpu.hide_modules(["json"])
    assert importlib.util.find_spec("json") is None
    with pytest.raises(ImportError):
        importlib.import_module("json")
    monkeypatch.undo()
    assert importlib.import_module("json")


# ---- runtime: post-import hooks and install ------------------------------------------------------------------


def test_on_import_runs_after_the_module_executes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "motor_fake_target.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "motor_fake_target", raising=False)
    seen: list[int] = []
    runtime.on_import(["motor_fake_target"], lambda module: seen.append(module.VALUE))
    assert seen == []
    module = importlib.import_module("motor_fake_target")
    assert seen == [1]
    assert module.VALUE == 1

    # Already imported: the callback runs at once.
    runtime.on_import(["motor_fake_target"], lambda module: seen.append(module.VALUE + 1))
    assert seen == [1, 2]
    monkeypatch.delitem(sys.modules, "motor_fake_target")


def test_install_applies_only_what_applies() -> None:
    assert runtime.install(Facts()) == []
    assert "cpu-torch-cuda-extensions" not in runtime.install(Facts(torch_version="2.13.0+cpu"))


def test_shim_dir_holds_only_sitecustomize() -> None:
    assert sorted(p.name for p in runtime.shim_dir().glob("*.py")) == ["sitecustomize.py"]
