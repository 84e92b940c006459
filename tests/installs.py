"""Tests that need what the dev install provides (scripts/setup_dev.sh: vLLM and its torch stack, Debian's
prometheus) carry `needs_install(present, message)`. Where the install is missing they skip, except in CI
(the `CI` environment variable set, as CI runs with CI=true): CI runs on a full install, so there a missing
one is a broken setup, and each such test fails with `message` instead (tests/conftest.py fails them)."""

import importlib.util
import os

import pytest

IN_CI = os.environ.get("CI", "").lower() not in ("", "0", "false")
MISSING_MARK = "install_missing"


def needs_install(present: bool, message: str) -> pytest.MarkDecorator:
    if not present and IN_CI:
        return getattr(pytest.mark, MISSING_MARK)(message)
    return pytest.mark.skipif(not present, reason=message)


def importable(*modules: str) -> bool:
    return all(importlib.util.find_spec(module) is not None for module in modules)


needs_vllm = needs_install(importable("vllm"), "vLLM is not installed: scripts/setup_dev.sh installs it")
