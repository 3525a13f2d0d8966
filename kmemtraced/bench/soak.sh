#!/usr/bin/env bash
# Hours on a small disk: a stress load recorded for MINUTES on a BUDGET
# (--max-size), the files rotated and the oldest removed. Prints, every
# STEP seconds, the recorder's RSS, its CPU time, the events the kernel
# handed it and its CPU per event over the step (flat over time is the
# goal), and the capture's files and bytes on disk; at the end, checks
# every kept file on its own (each must be OK), checks them as one capture,
# and reports over them (time and peak RSS).
#
#   usage: kmemtraced/bench/soak.sh [MINUTES [BUDGET [STEP]]]   (default 20 8M 60)
#
# The load: stress-ng's vm (anonymous pages mapped and unmapped), malloc
# and fork stressors, one of each. Needs root, tracefs and stress-ng;
# builds the release programs unless BIN names a folder holding them. The
# files are written under KEEP (default: a temporary directory, removed).
set -euo pipefail

MINUTES=${1:-20}
BUDGET=${2:-8M}
STEP=${3:-60}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=${BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release}
command -v stress-ng >/dev/null || { echo "missing stress-ng" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 2; }
if [ -z "${BIN_BUILT:-}" ] && [ "$BIN" = "${CARGO_TARGET_DIR:-$ROOT/target}/release" ]; then
    (cd "$ROOT" && cargo build -q --release -p kmemtraced -p kmemtrace-check -p kmemtrace-report)
fi
OUT=${KEEP:-$(mktemp -d /var/tmp/kmemtrace-soak.XXXXXX)}
mkdir -p "$OUT"
cleanup() {
    kill "$rec" "$load" 2>/dev/null || true
    wait 2>/dev/null || true
    [ -n "${KEEP:-}" ] || rm -rf "$OUT"
}
trap cleanup EXIT

secs=$((MINUTES * 60))
stress-ng --vm 1 --vm-bytes 64M --malloc 1 --fork 1 --timeout $((secs + 30))s -q &
load=$!
"$BIN/kmemtraced" -q -o "$OUT/soak.kmt" --max-size "$BUDGET" -d "${secs}s" &
rec=$!
sleep 1
tracefs=/sys/kernel/tracing
inst=$(ls -d "$tracefs"/instances/kmemtraced-"$rec"-* 2>/dev/null | head -1 || true)
events() { cat "$inst"/per_cpu/cpu*/stats 2>/dev/null | awk '/^read events:/ {s += $3} END {print s + 0}'; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$rec/stat" 2>/dev/null || echo 0; }
hz=$(getconf CLK_TCK)
printf '%6s %10s %10s %12s %12s %6s %10s\n' t_s rss_kib cpu_s events ns_per_event files bytes
prev_e=0 prev_c=0 t=0
while kill -0 "$rec" 2>/dev/null && [ $t -lt $secs ]; do
    sleep "$STEP"
    t=$((t + STEP))
    kill -0 "$rec" 2>/dev/null || break
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$rec/status")
    c=$(cpu_ticks) e=$(events)
    de=$((e - prev_e)) dc=$((c - prev_c))
    per=$(awk -v c="$dc" -v e="$de" -v hz="$hz" 'BEGIN { if (e > 0) printf "%.0f", c / hz * 1e9 / e; else print "-" }')
    # (A file may be removed between listing and reading.)
    files=$(find "$OUT" -name 'soak.*.kmt' 2>/dev/null | wc -l || true)
    bytes=$(find "$OUT" -name 'soak.*.kmt' -printf '%s\n' 2>/dev/null | awk '{s += $1} END {print s + 0}' || true)
    printf '%6d %10d %10.2f %12d %12s %6d %10d\n' "$t" "$rss" "$(awk -v c="$c" -v hz="$hz" 'BEGIN {print c / hz}')" "$e" "$per" "$files" "$bytes"
    prev_e=$e prev_c=$c
done
wait "$rec" || echo "kmemtraced exited $?"
kill "$load" 2>/dev/null || true
echo
echo "kept files (budget $BUDGET):"
ls -l "$OUT"/soak.*.kmt | awk '{print "  " $5, $9}'
echo "total: $(cat "$OUT"/soak.*.kmt | wc -c) bytes"
bad=0
for f in "$OUT"/soak.*.kmt; do
    "$BIN/kmemtrace-check" -q "$f" || bad=$((bad + 1))
done
echo "files that do not check OK on their own: $bad"
"$BIN/kmemtrace-check" -q "$OUT/soak.kmt" || true
/usr/bin/time -f "report over the kept files: %e s, peak RSS %M KiB" \
    "$BIN/kmemtrace-report" "$OUT/soak.kmt" > "$OUT/report.txt"
head -4 "$OUT/report.txt"
[ "$bad" = 0 ]
