# shellcheck shell=bash
# Sourced by the install scripts: `step TITLE COMMAND...` runs one install step with its output appended to
# $MOTOR_SETUP_LOG and prints one line, "TITLE ... ok 12.3 s"; on failure it prints the log's last lines and
# exits with the step's status. `note TEXT` prints a line without running anything.
: "${MOTOR_SETUP_LOG:?set MOTOR_SETUP_LOG before sourcing scripts/steps.sh}"
mkdir -p "$(dirname "$MOTOR_SETUP_LOG")"

_tenths_since() {
    local now=${EPOCHREALTIME/./}
    local tenths=$(((now - $1) / 100000))
    printf '%d.%d s' $((tenths / 10)) $((tenths % 10))
}

step() {
    local title=$1 started=${EPOCHREALTIME/./} status=0
    shift
    printf '  %-64s ' "$title"
    printf '\n=== %s: %s\n$ %s\n' "$(date -Is)" "$title" "$*" >>"$MOTOR_SETUP_LOG"
    "$@" >>"$MOTOR_SETUP_LOG" 2>&1 || status=$?
    if ((status == 0)); then
        printf 'ok %8s\n' "$(_tenths_since "$started")"
        return 0
    fi
    printf 'FAILED after %s (exit %d)\n' "$(_tenths_since "$started")" "$status"
    printf -- '--- last 40 lines of %s ---\n' "$MOTOR_SETUP_LOG" >&2
    tail -n 40 "$MOTOR_SETUP_LOG" >&2
    exit "$status"
}

note() {
    printf '  %s\n' "$*"
}
