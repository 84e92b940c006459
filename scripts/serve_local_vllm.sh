#!/usr/bin/env bash
# From a fresh Debian machine to a served examples/local (1 prefill + 1 decode vLLM CPU engine, Mooncake pool):
# libibverbs1 and the .venv virtual env with the CPU build of vLLM (scripts/setup_dev.sh), the tiny offline model,
# `motor deploy`, and one chat request through the coordinator.
# Stop it with: .venv/bin/motor stop --job-id motor-local
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
model_dir=.motor/models/tiny

log() { printf '[serve_local_vllm] %s\n' "$*"; }

scripts/setup_dev.sh
if [[ ! -f "$model_dir/model.safetensors" ]]; then
    HF_HUB_OFFLINE=1 .venv/bin/motor model tiny "$model_dir"
fi
# examples/local names the model by the relative path above; deploy resolves it against this directory.
.venv/bin/motor deploy --config-dir examples/local

log "chat request through the coordinator (the tiny model is random: expect noise, deterministic noise)"
curl -sS --max-time 120 http://127.0.0.1:1025/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"model": "tiny", "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 16, "temperature": 0}'
echo
