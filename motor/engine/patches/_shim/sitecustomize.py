"""Put first on PYTHONPATH by motor's engine server: installs motor's gated runtime patches in this process.

Only fixes whose predicate says they apply here are installed (`motor patch status` lists them), and those
that target a vLLM module take effect when that module is imported. Another sitecustomize that this file
shadows still runs.
"""

import importlib.util
import os
import sys


def _install_motor_patches() -> None:
    try:
        from motor.engine.patches.runtime import install
    except ImportError as exc:
        print(
            f"motor patch shim: motor is not importable here ({exc}); no patches installed", file=sys.stderr
        )
        return
    install()


def _run_shadowed_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if not entry or os.path.abspath(entry) == here:
            continue
        candidate = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_motor_shadowed_sitecustomize", candidate)
            if spec is not None and spec.loader is not None:
                spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


_install_motor_patches()
_run_shadowed_sitecustomize()
