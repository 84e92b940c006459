#!/usr/bin/env bash
# Install NVIDIA Dynamo 1.6.1 (its frontend, KV router and mocker engine) into a virtual environment of its
# own, beside motor's, as the reference peer of two benchmarks (benchmarks/migration_vs_dynamo.py and the
# Dynamo path of benchmarks/cluster_scheduling.py). Benchmark tooling only: CI does not run it and motor does
# not import it.
#
#   scripts/install_dynamo.sh [VENV_DIR]      default: .venv-dynamo
#
# `ai-dynamo` and `ai-dynamo-runtime` are installed with --no-deps, then every dependency their wheels list
# for this Python (no extras) except `aisimulate`: a stub whose install downloads from an index this machine
# cannot reach, needed only by the mocker's AIS performance model, which the benchmarks do not use.
# Idempotent: re-running on a finished venv only re-checks it. One line per step; pip's output goes to
# MOTOR_SETUP_LOG (default .motor/setup-dynamo.log), whose last lines are shown only when a step fails.
set -euo pipefail

repo_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv_dir="${1:-$repo_dir/.venv-dynamo}"
python_bin="${PYTHON:-python3}"
dynamo_version="1.6.1"
skipped_dependencies=(aisimulate)
export MOTOR_SETUP_LOG="${MOTOR_SETUP_LOG:-$repo_dir/.motor/setup-dynamo.log}"
# shellcheck source=scripts/steps.sh
source "$repo_dir/scripts/steps.sh"

if [[ -x "$venv_dir/bin/python" ]]; then
    note "venv: $venv_dir exists"
else
    step "venv: create $venv_dir" "$python_bin" -m venv "$venv_dir"
fi
python=("$venv_dir/bin/python")
pip=("${python[@]}" -m pip)

stamp="$venv_dir/.dynamo-install-stamp"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$dynamo_version" ]]; then
    note "pip: ai-dynamo $dynamo_version already installed in $venv_dir"
else
    rm -f "$stamp"
    step "pip: packaging (to read the wheels' requirements)" "${pip[@]}" install --quiet packaging
    step "pip: ai-dynamo $dynamo_version, ai-dynamo-runtime $dynamo_version (--no-deps)" \
        "${pip[@]}" install --quiet --no-deps \
        "ai-dynamo==$dynamo_version" "ai-dynamo-runtime==$dynamo_version"
    # what the two distributions require for this interpreter, extras left out, aisimulate skipped
    mapfile -t requirements < <("${python[@]}" - "${skipped_dependencies[@]}" <<'EOF'
import sys
from importlib.metadata import requires
from packaging.requirements import Requirement

skipped = set(sys.argv[1:])
own = {"ai-dynamo", "ai-dynamo-runtime"}
for distribution in sorted(own):
    for text in requires(distribution) or []:
        requirement = Requirement(text)
        if requirement.name in skipped or requirement.name in own:
            continue
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            print(str(requirement).split(";")[0].strip())
EOF
    )
    note "dependencies: ${requirements[*]} (skipped: ${skipped_dependencies[*]})"
    step "pip: the dependencies" "${pip[@]}" install --quiet "${requirements[@]}"
fi

step "check: import dynamo.frontend and dynamo.mocker" \
    "${python[@]}" -c "import dynamo.frontend, dynamo.mocker, dynamo._core"
note "$("${python[@]}" -c "from importlib.metadata import version as v
print('ai-dynamo', v('ai-dynamo'), 'ai-dynamo-runtime', v('ai-dynamo-runtime'))")"
printf '%s' "$dynamo_version" >"$stamp"
