#!/usr/bin/env bash
# Prepare a fresh Debian machine for motor: system packages, a virtual env in .venv, motor with its dev extras.
# Idempotent; run from anywhere. Needs root (or sudo) for apt-get.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_packages=(libibverbs1)
missing=()
for package in "${apt_packages[@]}"; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -q
  $sudo_cmd apt-get install -y -q "${missing[@]}"
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev]'
.venv/bin/python -c "import motor, mooncake.store" && echo "motor dev environment ready in .venv"
