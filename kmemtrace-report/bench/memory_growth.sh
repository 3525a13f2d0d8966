#!/usr/bin/env bash
# Does the report's memory follow what is live, or the capture's length?
# One steady load, recorded for SHORT and for LONG seconds; each capture
# reported ROUNDS times per analysis, rounds taken in turn; prints per
# analysis the report's peak RSS on each (median and range), the ratio of
# the medians (the goal: at most 1.2) and the events each capture holds.
#
#   usage: kmemtrace-report/bench/memory_growth.sh [SHORT LONG [ROUNDS]]
#          (default 10 100 3)
#
# The load, steady from its second second on: in a memory cgroup limited to
# 48 MiB, a reader of a 200 MiB file over and over (page-cache allocations
# and memcg reclaim: the stall analysis's waits), beside stress-ng's vm
# (anonymous pages mapped and unmapped), malloc and fork stressors (slab
# objects made and freed), and every two seconds the clean page cache
# dropped (else the log's own page cache grows the live set). Analyses: the default (slab call sites, caches,
# leaks, misuse), --page, --stalls, and --live (every live object and page
# named at the end).
# Needs root, tracefs, a memory cgroup and stress-ng; builds kmemtraced and
# kmemtrace-report (release) unless BIN names a folder holding them.
set -euo pipefail

SHORT=${1:-10}
LONG=${2:-100}
ROUNDS=${3:-3}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=${BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release}
command -v stress-ng >/dev/null || { echo "missing stress-ng" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 2; }
if [ ! -x "$BIN/kmemtraced" ] || [ ! -x "$BIN/kmemtrace-report" ]; then
  (cd "$ROOT" && cargo build --release -q -p kmemtraced -p kmemtrace-report)
fi

# KEEP=DIR records into DIR and keeps it; with the two captures already
# there, it reports them again without recording.
WORK=${KEEP:-$(mktemp -d /var/tmp/kmt-memory-growth.XXXXXX)}
mkdir -p "$WORK"
CG=
LOAD=
cleanup() {
  [ -n "$LOAD" ] && kill -- -"$LOAD" 2>/dev/null
  sleep 0.5
  [ -n "$CG" ] && rmdir "$CG" 2>/dev/null
  [ -n "${KEEP:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT

. "$ROOT/scripts/bench-memcg.sh"
CG=$(memcg_create kmt-memory-growth-$$ $((48 << 20))) || exit 2
if [ ! -s "$WORK/$SHORT.kmt" ] || [ ! -s "$WORK/$LONG.kmt" ]; then
dd if=/dev/urandom of="$WORK/big" bs=1M count=200 conv=fdatasync status=none

cat > "$WORK/load.sh" <<EOF
echo \$\$ > $CG/cgroup.procs
stress-ng --quiet --vm 1 --vm-bytes 16M --malloc 1 --fork 1 --timeout $((SHORT + LONG + 60))s &
while :; do cat $WORK/big > /dev/null; done &
# The log being written fills the page cache, and the kernel's objects
# for it (xarray nodes, buffer heads) stay live: with clean caches dropped
# every two seconds, what is live stays steady.
while :; do sleep 2; sync; echo 1 > /proc/sys/vm/drop_caches; done
EOF
setsid bash "$WORK/load.sh" &
LOAD=$!
sleep 2

for d in "$SHORT" "$LONG"; do
  "$BIN/kmemtraced" -q -d "${d}s" -o "$WORK/$d.kmt" >/dev/null
done
kill -- -"$LOAD" 2>/dev/null || true
LOAD=
rm -f "$WORK/big"
fi

# Events, and the objects live at the end (what the report's memory should
# follow).
events() {
  "$BIN/kmemtrace-report" --json "$1" 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
n, live = d["capture"]["events"], d["summary"]["live_objects"]
print(f"{n:,} events, {live:,} objects live at the end")' \
    2>/dev/null || echo "?"
}

ANALYSES=("default" "--page" "--stalls" "--live")
declare -A RSS
for ((r = 0; r < ROUNDS; r++)); do
  for a in "${ANALYSES[@]}"; do
    for d in "$SHORT" "$LONG"; do
      opt=()
      [ "$a" != default ] && opt=("$a")
      /usr/bin/time -f %M -o "$WORK/rss" "$BIN/kmemtrace-report" "${opt[@]}" "$WORK/$d.kmt" \
        >/dev/null 2>&1 || true
      RSS[$a,$d]="${RSS[$a,$d]:-} $(tail -1 "$WORK/rss")"
    done
  done
done

echo "${SHORT} s: $(du -h "$WORK/$SHORT.kmt" | cut -f1), $(events "$WORK/$SHORT.kmt")"
echo "${LONG} s: $(du -h "$WORK/$LONG.kmt" | cut -f1), $(events "$WORK/$LONG.kmt")"
printf '%-10s %22s %22s %7s\n' analysis "peak RSS ${SHORT} s (MB)" "peak RSS ${LONG} s (MB)" ratio
for a in "${ANALYSES[@]}"; do
  python3 - "$a" "${RSS[$a,$SHORT]}" "${RSS[$a,$LONG]}" <<'EOF'
import statistics, sys
name, short, long_ = sys.argv[1], [int(x) / 1024 for x in sys.argv[2].split()], [int(x) / 1024 for x in sys.argv[3].split()]
def fmt(v):
    return f"{statistics.median(v):.1f} ({min(v):.1f}-{max(v):.1f})"
ratio = statistics.median(long_) / statistics.median(short)
print(f"{name:<10} {fmt(short):>22} {fmt(long_):>22} {ratio:7.2f}{'' if ratio <= 1.2 else '  > 1.2'}")
EOF
done
