"""Apply the fixes that apply here: start-up ones at once, the others when their target module is imported."""

import importlib.abc
import importlib.machinery
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from motor.engine.patches.facts import Facts, accelerator_available, gather_facts
from motor.engine.patches.patch import Patch, PatchTargetError
from motor.engine.patches.registry import decide_all

log = logging.getLogger("motor.engine.patches")
ModuleCallback = Callable[[ModuleType], None]


def shim_dir() -> Path:
    """The directory whose sitecustomize.py installs the patches in every engine process started with it first
    on PYTHONPATH."""
    return Path(__file__).resolve().parent / "_shim"


def install(facts: Facts | None = None) -> list[str]:
    """Install every applicable fix in this interpreter; return the names of those installed or scheduled."""
    facts = facts or gather_facts()
    _log_to_stderr()
    installed = []
    for patch, decision in decide_all(facts):
        if not decision.applies:
            continue
        if patch.targets:
            on_import(patch.targets, _deferred(patch, facts))
        else:
            patch.apply(None, facts)
            log.info("motor patch %s applied: %s", patch.name, decision.why)
        installed.append(patch.name)
    return installed


def _deferred(patch: Patch, facts: Facts) -> ModuleCallback:
    def apply_now(module: ModuleType) -> None:
        current = (
            facts
            if facts.accelerator_present is not None
            else facts.with_accelerator(accelerator_available())
        )
        decision = patch.decide(current)
        if not decision.applies:
            log.info("motor patch %s skipped at import of %s: %s", patch.name, module.__name__, decision.why)
            return
        try:
            patch.apply(module, current)
        except PatchTargetError as exc:
            log.warning("motor patch %s not applied: %s", patch.name, exc)
            return
        log.info("motor patch %s applied to %s: %s", patch.name, module.__name__, decision.why)

    return apply_now


def _log_to_stderr() -> None:
    # Engines configure their own loggers, not ours: without a handler the lines saying what was patched are lost.
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False


# ---- post-import hooks ---------------------------------------------------------------------------------------


def on_import(module_names: Sequence[str], callback: ModuleCallback) -> None:
    """Run `callback(module)` right after the first of `module_names` executes (at once if already imported)."""
    for name in module_names:
        module = sys.modules.get(name)
        if module is not None:
            callback(module)
            return
    finder = _finder()
    pending = {"done": False}

    def once(module: ModuleType) -> None:
        if not pending["done"]:
            pending["done"] = True
            callback(module)

    for name in module_names:
        finder.callbacks.setdefault(name, []).append(once)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Finds target modules through the other finders and wraps their loader to run callbacks afterwards."""

    def __init__(self) -> None:
        self.callbacks: dict[str, list[ModuleCallback]] = {}

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        callbacks = self.callbacks.pop(fullname, None)
        if not callbacks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _CallbackLoader(spec.loader, callbacks)
        return spec


class _CallbackLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, callbacks: list[ModuleCallback]) -> None:
        self._loader = loader
        self._callbacks = callbacks

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        for callback in self._callbacks:
            callback(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


def _finder() -> _PostImportFinder:
    for finder in sys.meta_path:
        if isinstance(finder, _PostImportFinder):
            return finder
    finder = _PostImportFinder()
    sys.meta_path.insert(0, finder)
    return finder
