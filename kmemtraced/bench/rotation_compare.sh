#!/usr/bin/env bash
# Keeping the newest data within a size, beside the peers: one stress load
# recorded for SECONDS with the kmem events (`kmem:*`) on a budget of
# BUDGET_MB by
#   - kmemtraced --max-size BUDGET_MB (files rotated, the oldest removed),
#   - trace-cmd record -m (per-CPU KiB: BUDGET_MB over the CPUs; it keeps
#     two halves per CPU, switching between them),
#   - perf record --switch-output=SIZE --switch-max-files=4 (files of a
#     quarter of the budget, four kept),
# each in turn, ROUNDS times. Prints per tool and round: the bytes kept at
# the end, the events kept and the seconds of the load they cover (the
# newest), the recorder's CPU seconds, and whether what was kept reads
# back (kmemtrace-check; trace-cmd report; perf script).
#
#   usage: kmemtraced/bench/rotation_compare.sh [SECONDS [BUDGET_MB [ROUNDS]]]
#          (default 60 8 2)
#
# Needs root, tracefs, stress-ng, perf and trace-cmd (through
# ../shared/tools/trace-cmd-sandboxed where present); builds the release
# programs unless BIN names a folder holding them.
set -euo pipefail

SECONDS_=${1:-60}
BUDGET=${2:-8}
ROUNDS=${3:-2}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=${BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release}
TRACE_CMD=${TRACE_CMD:-$ROOT/../shared/tools/trace-cmd-sandboxed}
[ -x "$TRACE_CMD" ] || TRACE_CMD=trace-cmd
for t in stress-ng perf; do
    command -v "$t" >/dev/null || { echo "missing $t" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 2; }
if [ -z "${BIN_BUILT:-}" ] && [ "$BIN" = "${CARGO_TARGET_DIR:-$ROOT/target}/release" ]; then
    (cd "$ROOT" && cargo build -q --release -p kmemtraced -p kmemtrace-check)
fi
WORK=$(mktemp -d /var/tmp/kmemtrace-rotation-compare.XXXXXX)
load=
cleanup() {
    [ -n "$load" ] && kill "$load" 2>/dev/null
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
cpus=$(nproc)
per_cpu_kb=$((BUDGET * 1024 / cpus))
file_mb=$((BUDGET / 4))

# CPU seconds (user + system) of process $1 and its children, once it ended:
# from `time`'s output in file $2.
cpu_of() { awk '/^cpu / {print $2 + $3}' "$1"; }
# Runs "$@" under the load for SECONDS_, then SIGINT; its CPU seconds go to
# $OUTDIR/cpu.
record() {
    stress-ng --vm 1 --vm-bytes 64M --malloc 1 --fork 1 --timeout $((SECONDS_ + 5))s -q &
    load=$!
    /usr/bin/time -f 'cpu %U %S' -o "$OUTDIR/cpu" "$@" &
    local rec=$!
    sleep "$SECONDS_"
    # The recorder under `time`: signal it (its process group would take
    # `time` too).
    pkill -INT -P "$rec" 2>/dev/null || true
    wait "$rec" 2>/dev/null || true
    kill "$load" 2>/dev/null || true
    wait "$load" 2>/dev/null || true
    load=
}

# Prints: tool round bytes_kept events_kept secs_covered cpu_s reads_back
row() {
    printf '%-10s %5s %12s %12s %8s %7s %s\n' "$@"
}
row tool round bytes_kept events_kept span_s cpu_s reads_back

kmt() {
    OUTDIR=$WORK/kmt.$1 && mkdir -p "$OUTDIR"
    record "$BIN/kmemtraced" -q -e 'kmem:*' --page-stacks off \
        -o "$OUTDIR/r.kmt" --max-size "${BUDGET}M"
    local bytes json events span ok
    bytes=$(du -cb "$OUTDIR"/r.*.kmt | awk 'END {print $1}')
    json=$("$BIN/kmemtrace-check" --json "$OUTDIR/r.kmt" || true)
    events=$(python3 -c 'import json,sys; t=json.loads(sys.argv[1])["files"][0]["total"]; print(t["events"])' "$json")
    span=$(python3 -c 'import json,sys; t=json.loads(sys.argv[1])["files"][0]["total"]; print("%.1f" % (t["span_ns"] / 1e9))' "$json")
    ok=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["files"][0]["verdict"])' "$json")
    row kmemtraced "$1" "$bytes" "$events" "$span" "$(cpu_of "$OUTDIR/cpu")" "$ok"
}

tcmd() {
    OUTDIR=$WORK/tc.$1 && mkdir -p "$OUTDIR"
    record "$TRACE_CMD" record -q -e kmem -m "$per_cpu_kb" -o "$OUTDIR/trace.dat"
    local bytes events span ok=ok
    bytes=$(stat -c %s "$OUTDIR/trace.dat")
    "$TRACE_CMD" report -i "$OUTDIR/trace.dat" 2>"$OUTDIR/report.err" |
        awk 'match($0, /\] +[0-9]+\.[0-9]+: /) {t = substr($0, RSTART + 1, RLENGTH - 3); n++; if (!f) f = t; l = t}
             END {printf "%d %.1f\n", n, l - f}' \
        > "$OUTDIR/count" || ok=failed
    read -r events span < "$OUTDIR/count"
    [ -s "$OUTDIR/report.err" ] && grep -qi error "$OUTDIR/report.err" && ok=errors
    row trace-cmd "$1" "$bytes" "$events" "$span" "$(cpu_of "$OUTDIR/cpu")" "$ok"
}

perfrec() {
    OUTDIR=$WORK/perf.$1 && mkdir -p "$OUTDIR"
    (cd "$OUTDIR" && record perf record -q -a -e 'kmem:*' \
        --switch-output="${file_mb}M" --switch-max-files=4 -o perf.data)
    local bytes events=0 span=0 ok=ok f
    bytes=$(du -cb "$OUTDIR"/perf.data* | awk 'END {print $1}')
    for f in "$OUTDIR"/perf.data*; do
        perf script -i "$f" -F time 2>/dev/null >> "$OUTDIR/times" || ok=failed
    done
    read -r events span < <(tr -d ' :' < "$OUTDIR/times" | sort -n |
        awk 'NF {n++; if (!f) f=$1; l=$1} END {printf "%d %.1f\n", n, l - f}')
    row perf "$1" "$bytes" "$events" "$span" "$(cpu_of "$OUTDIR/cpu")" "$ok"
}

echo "# ${SECONDS_} s of stress-ng (vm, malloc, fork) on ${cpus} CPUs, budget ${BUDGET} MB, kmem:*"
for r in $(seq 1 "$ROUNDS"); do
    kmt "$r"
    tcmd "$r"
    perfrec "$r"
done
