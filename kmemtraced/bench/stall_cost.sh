#!/usr/bin/env bash
# What recording the allocation stall events costs the traced workload: the
# same two loads, untraced, under kmemtraced without the stall events
# (--stalls off), under kmemtraced with them (its default), and under
# trace-cmd recording the same kmem and stall events, rounds taken in turn.
# Prints per load and recorder the workload's wall time (median and range
# over the rounds), the log's bytes, and the stall events recorded.
#
#   usage: kmemtraced/bench/stall_cost.sh [ROUNDS]   (default 5)
#
# Loads:
#   no pressure  stress-ng's vm, malloc and fork stressors for a fixed
#                number of operations: allocations, no reclaim;
#   pressure     a task in a memory cgroup limited to 48 MiB reading a
#                200 MiB file not in the page cache twice: memcg reclaim
#                at nearly every page-cache charge.
# Needs root, tracefs, a memory cgroup (v1 memory.limit_in_bytes or v2
# memory.max), stress-ng and trace-cmd (through
# ../shared/tools/trace-cmd-sandboxed where present); builds kmemtraced and
# kmemtrace-report (release) unless KMEMTRACED and KMEMTRACE_REPORT name
# them.
set -euo pipefail

ROUNDS=${1:-5}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
KMT=${KMEMTRACED:-$TARGET/release/kmemtraced}
REPORT=${KMEMTRACE_REPORT:-$TARGET/release/kmemtrace-report}
TRACE_CMD=$ROOT/../shared/tools/trace-cmd-sandboxed
[ -x "$TRACE_CMD" ] || TRACE_CMD=trace-cmd
for t in stress-ng trace-cmd python3; do
  command -v "$t" >/dev/null || { echo "missing $t: apt-get install -y stress-ng trace-cmd" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 2; }
if [ ! -x "$KMT" ] || [ ! -x "$REPORT" ]; then
  (cd "$ROOT" && cargo build --release -q -p kmemtraced -p kmemtrace-report)
fi

WORK=$(mktemp -d /var/tmp/kmt-stall-cost.XXXXXX)
CG=
cleanup() {
  [ -n "$CG" ] && rmdir "$CG" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

# The memory cgroup of the pressure load.
. "$ROOT/scripts/bench-memcg.sh"
CG=$(memcg_create kmt-stall-cost-$$ $((48 << 20))) || exit 2
dd if=/dev/urandom of="$WORK/big" bs=1M count=200 conv=fdatasync status=none

# The events trace-cmd records: kmemtraced's defaults on this kernel.
TC_EV=()
for e in kmalloc kmalloc_node kfree kmem_cache_alloc kmem_cache_alloc_node kmem_cache_free \
         mm_page_alloc mm_page_free mm_page_free_batched mm_page_alloc_zone_locked \
         mm_page_pcpu_drain mm_page_alloc_extfrag; do
  [ -d /sys/kernel/tracing/events/kmem/$e ] && TC_EV+=(-e "kmem:$e")
done
for e in $(sed -n 's/^STALL_EVENTS="\(.*\)"$/\1/p' "$ROOT/kmemtraced/kmemtrace-capture.sh"); do
  [ -d "/sys/kernel/tracing/events/${e%%:*}/${e#*:}" ] && TC_EV+=(-e "$e")
done

# The loads, as scripts: the recorders run them as their command.
cat > "$WORK/nopressure.sh" <<EOF
stress-ng --quiet --vm 1 --vm-bytes 64M --vm-ops 12 --malloc 1 --malloc-ops 100000 \
  --fork 1 --fork-ops 1000
EOF
cat > "$WORK/pressure.sh" <<EOF
echo \$\$ > $CG/cgroup.procs
cat $WORK/big > /dev/null
dd if=$WORK/big iflag=nocache count=0 status=none
cat $WORK/big > /dev/null
EOF

# run LOAD RECORDER ROUND: appends "load recorder seconds bytes stall_events".
run() {
  local load=$1 rec=$2 out="$WORK/$1-$2-$3" t0 t1
  # Every run reads the file from disk (the pressure load drops it).
  dd if="$WORK/big" iflag=nocache count=0 status=none
  case $rec in
  none)
    t0=$(date +%s.%N); sh "$WORK/$load.sh"; t1=$(date +%s.%N) ;;
  kmemtraced-stalls-off|kmemtraced)
    local extra=(); [ "$rec" = kmemtraced-stalls-off ] && extra=(--stalls off)
    t0=$(date +%s.%N)
    "$KMT" -q "${extra[@]}" -o "$out.kmt" -- sh "$WORK/$load.sh"
    t1=$(date +%s.%N) ;;
  trace-cmd)
    t0=$(date +%s.%N)
    "$TRACE_CMD" record -q "${TC_EV[@]}" -o "$out.dat" -- sh "$WORK/$load.sh" >/dev/null 2>&1
    t1=$(date +%s.%N) ;;
  esac
  local bytes=0 stalls=-
  [ -f "$out.kmt" ] && bytes=$(stat -c %s "$out.kmt") && \
    stalls=$("$REPORT" "$out.kmt" --json | python3 -c 'import json,sys; print(json.load(sys.stdin).get("stalls",{}).get("events","-"))')
  [ -f "$out.dat" ] && bytes=$(stat -c %s "$out.dat")
  echo "$load $rec $(echo "$t1 - $t0" | bc) $bytes $stalls" >> "$WORK/results"
  rm -f "$out.kmt" "$out.dat"
}

for round in $(seq "$ROUNDS"); do
  for load in nopressure pressure; do
    for rec in none kmemtraced-stalls-off kmemtraced trace-cmd; do
      run "$load" "$rec" "$round"
    done
  done
  echo "round $round of $ROUNDS done" >&2
done

python3 - "$WORK/results" "$ROUNDS" <<'PY'
import sys, statistics
rows = {}
for line in open(sys.argv[1]):
    load, rec, secs, size, stalls = line.split()
    rows.setdefault((load, rec), []).append((float(secs), int(size), stalls))
print(f"{sys.argv[2]} rounds, taken in turn; the workload's wall time, median [min-max]")
print(f"{'load':<11} {'recorder':<22} {'wall s':>24} {'vs none':>8} {'log MB':>7} {'stall events':>12}")
for load in ("nopressure", "pressure"):
    base = statistics.median(s for s, _, _ in rows[(load, "none")])
    for rec in ("none", "kmemtraced-stalls-off", "kmemtraced", "trace-cmd"):
        r = rows[(load, rec)]
        secs = [s for s, _, _ in r]
        med = statistics.median(secs)
        size = statistics.median(b for _, b, _ in r) / 1e6
        stalls = "/".join(sorted({x for _, _, x in r}))
        wall = f"{med:.3f} [{min(secs):.3f}-{max(secs):.3f}]"
        print(f"{load:<11} {rec:<22} {wall:>24} {med / base:>7.2f}x {size:>7.1f} {stalls:>12}")
PY
