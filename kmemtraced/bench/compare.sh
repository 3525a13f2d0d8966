#!/usr/bin/env bash
# Runs the same stress-ng allocation load under kmemtraced, trace-cmd record
# and perf record, each recording every kmem allocation event system-wide
# with the same per-CPU buffer size, and prints side by side: events
# captured, events lost, the recorder's CPU seconds (user + system, its
# threads and its child processes) and peak RSS, and bytes on disk per event.
#
#   usage: kmemtraced/bench/compare.sh [SECONDS] [BUFFER_KB] [ROUNDS]
#     SECONDS    length of the load (default 10)
#     BUFFER_KB  per-CPU ring buffer, KiB, a power of two (default 4096)
#     ROUNDS     runs per recorder; the table shows each run (default 1)
#   environment: STRESS="stress-ng arguments" overrides the load;
#                KMEMTRACED_ARGS adds options to kmemtraced (e.g. "--compress 3");
#                KMEMTRACED_VARIANTS="|--compress fast=3|--compress none" runs
#                kmemtraced once per variant ('|'-separated; empty = defaults);
#                RECORDERS="kmemtraced trace-cmd" runs only those (default: all three);
#                KEEP=1 keeps the recordings in the work directory.
#
# Needs root, tracefs, and: apt-get install -y trace-cmd stress-ng linux-perf
# trace-cmd runs through /work/shared/tools/trace-cmd-sandboxed when present
# (this machine refuses the function-tracer knobs trace-cmd touches). It
# records into the top-level buffer, its default: trace-cmd 3.1.6 crashes
# on SIGINT when given an instance (-B). It compresses its data by default.
# Peak RSS is GNU time's %M: for trace-cmd, whose recorders are one process
# per CPU, that is the largest process, not the sum.
set -euo pipefail

SECS=${1:-10}
BUF_KB=${2:-4096}
ROUNDS=${3:-1}
STRESS=${STRESS:-"--vm 1 --vm-bytes 128M --vm-keep --open 1 --fork 1 --malloc 1"}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TRACE_CMD=/work/shared/tools/trace-cmd-sandboxed
[ -x "$TRACE_CMD" ] || TRACE_CMD=trace-cmd

for t in stress-ng trace-cmd perf /usr/bin/time; do
  command -v "$t" >/dev/null || { echo "missing $t: apt-get install -y trace-cmd stress-ng linux-perf time" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 2; }

KMT=${KMEMTRACED:-${CARGO_TARGET_DIR:-$ROOT/target}/release/kmemtraced}
if [ ! -x "$KMT" ]; then
  (cd "$ROOT" && cargo build --release -p kmemtraced --quiet)
fi

EVENTS=()
for e in kmalloc kmalloc_node kfree kmem_cache_alloc kmem_cache_alloc_node kmem_cache_free \
         mm_page_alloc mm_page_free mm_page_free_batched mm_page_alloc_zone_locked \
         mm_page_pcpu_drain mm_page_alloc_extfrag; do
  [ -d /sys/kernel/tracing/events/kmem/$e ] && EVENTS+=("$e")
done
TC_EV=(); for e in "${EVENTS[@]}"; do TC_EV+=(-e "kmem:$e"); done
PERF_EV=$(printf 'kmem:%s,' "${EVENTS[@]}"); PERF_EV=${PERF_EV%,}
PAGES=$((BUF_KB / 4))

RECORDERS=${RECORDERS:-"kmemtraced trace-cmd perf"}
WORK=$(mktemp -d /tmp/kmt-bench.XXXXXX)
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$WORK"' EXIT

# run_one NAME OUTFILE -- RECORDER ARGS...
# Starts the recorder under GNU time, waits 2 s, runs the load, stops the
# recorder with SIGINT and waits for it.
run_one() {
  local name=$1 out=$2; shift 3
  local tfile=$WORK/$name.time log=$WORK/$name.log
  /usr/bin/time -f '%U %S %M' -o "$tfile" "$@" >"$log" 2>&1 &
  local tpid=$!
  sleep 2
  local rpid
  rpid=$(pgrep -P "$tpid" | head -1)
  # --temp-path: the open stressor's files, left behind when it is cut off
  # at the timeout, go into the scratch directory, not the caller's.
  stress-ng $STRESS --temp-path "$WORK" --timeout "${SECS}s" --quiet >/dev/null 2>&1 || true
  sleep 1
  kill -INT "$rpid" 2>/dev/null || true
  wait "$tpid" || true
  local u s m
  read -r u s m < <(tail -1 "$tfile")
  CPU=$(awk -v u="$u" -v s="$s" 'BEGIN{printf "%.2f", u+s}')
  RSS=$m
  SIZE=$(stat -c %s "$out")
}

count_kmt() {
  # Figures from kmemtraced's own summary line.
  local log=$WORK/kmemtraced.log
  CAPT=$(grep -oE '[0-9,]+ events in' "$log" | tail -1 | tr -d ', a-z')
  LOST=$(grep -oE 'lost: [^;]*' "$log" | tail -1 | grep -oE 'cpu[0-9]+ [0-9,]+' | awk '{gsub(",","",$2); t+=$2} END{print t+0}')
}

count_tc() {
  local dat=$WORK/trace.dat
  CAPT=$($TRACE_CMD report -i "$dat" 2>/dev/null | grep -cE ' (kmalloc|kfree|kmem_cache_alloc|kmem_cache_free|mm_page_[a-z_]+|kmalloc_node|kmem_cache_alloc_node): ' || true)
  # Lost: the kernel's per-CPU overrun and dropped counts, which trace-cmd
  # stores at the end of the recording (its buffer is reset at the start).
  LOST=$($TRACE_CMD report -i "$dat" --stat 2>/dev/null | grep -E '^(overrun|commit overrun|dropped events):' | awk -F: '{t+=$2} END{print t+0}')
}

count_perf() {
  local data=$WORK/perf.data
  CAPT=$(perf report -i "$data" --stats 2>/dev/null | awk '/SAMPLE events:/ {print $3; exit}')
  # Samples the kernel could not put in perf's buffers (PERF_RECORD_LOST).
  LOST=$(perf script -i "$data" --show-lost-events -F event 2>/dev/null | { grep -oE 'PERF_RECORD_LOST lost [0-9]+' || true; } | awk '{t+=$3} END{print t+0}')
}

# Fixed cost (start-up and stop: kallsyms, formats, statistics): each
# recorder for 1 s with one rare event, no load. Per-event figures below
# include it; a short run's CPU ns/event are dominated by it.
fixed() {
  /usr/bin/time -f '%U %S' -o "$WORK/fixed.time" "$@" >/dev/null 2>&1 || true
  awk 'END {printf "%.2f", $1+$2}' "$WORK/fixed.time"
}
FIX_KMT=$(fixed "$KMT" -q -o "$WORK/fixed.kmt" -e mm_page_alloc_extfrag -d 1s)
FIX_TC=$(fixed "$TRACE_CMD" record -q -e kmem:mm_page_alloc_extfrag -o "$WORK/fixed.dat" sleep 1)
rm -f "$WORK"/fixed.*
echo "fixed cost (1 s, one rare event, no load): kmemtraced ${FIX_KMT} CPU s, trace-cmd ${FIX_TC} CPU s"

printf '%s\n' "load: stress-ng $STRESS --timeout ${SECS}s; buffer ${BUF_KB} KiB per CPU; events: ${EVENTS[*]}"
printf '%-28s %12s %10s %8s %9s %10s %12s\n' recorder captured lost 'CPU s' 'RSS KiB' 'B/event' 'CPU ns/event'
row() {
  local per ev
  ev=${CAPT:-0}
  per=$(awk -v b="$SIZE" -v e="$ev" 'BEGIN{ if (e>0) printf "%.1f", b/e; else print "-" }')
  local cpk
  cpk=$(awk -v c="$CPU" -v e="$ev" 'BEGIN{ if (e>0) printf "%.0f", c*1e9/e; else print "-" }')
  printf '%-28s %12s %10s %8s %9s %10s %12s\n' "$1" "$ev" "${LOST:-?}" "$CPU" "$RSS" "$per" "$cpk"
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$ev" "$CPU" "${LOST:-0}" "$r" >>"$WORK/rows.tsv"
}

for r in $(seq "$ROUNDS"); do
  rm -f "$WORK"/*.kmt "$WORK"/trace.dat* "$WORK"/perf.data*
  if [[ " $RECORDERS " == *" kmemtraced "* ]]; then
  IFS='|' read -ra variants <<<"${KMEMTRACED_VARIANTS:-}"
  [ ${#variants[@]} -gt 0 ] || variants=("")
  for v in "${variants[@]}"; do
    # shellcheck disable=SC2086
    run_one kmemtraced "$WORK/k.kmt" -- "$KMT" -o "$WORK/k.kmt" -b "$BUF_KB" ${KMEMTRACED_ARGS:-} $v
    count_kmt; row "kmemtraced${v:+ $v}"
  done
  fi
  [[ " $RECORDERS " == *" trace-cmd "* ]] && {
  run_one trace-cmd "$WORK/trace.dat" -- "$TRACE_CMD" record "${TC_EV[@]}" -b "$BUF_KB" -o "$WORK/trace.dat"
  count_tc; row trace-cmd
  }
  [[ " $RECORDERS " == *" perf "* ]] && {
  run_one perf "$WORK/perf.data" -- perf record -q -a -e "$PERF_EV" -m "$PAGES" -o "$WORK/perf.data"
  count_perf; row perf
  }
done
echo "(CPU ns/event: the recorder's CPU time divided by the events it captured)"
# Medians over the rounds, and per event net of the fixed cost.
python3 - "$WORK/rows.tsv" "$FIX_KMT" "$FIX_TC" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
fixed = {"kmemtraced": float(sys.argv[2]), "trace-cmd": float(sys.argv[3])}
by = {}
per_round = {}
for name, ev, cpu, lost, rnd in rows:
    if int(ev) > 0:
        by.setdefault(name, []).append((int(ev), float(cpu), int(lost)))
        per_round.setdefault(rnd, {})[name] = float(cpu) * 1e9 / int(ev)
print()
print(f"{'median over rounds':<40} {'CPU ns/event':>12} {'net of fixed':>12} {'lost':>10}")
med = {}
for name, v in by.items():
    f = fixed.get(name.split()[0])
    ns = statistics.median(c * 1e9 / e for e, c, _ in v)
    net = statistics.median(max(c - f, 0) * 1e9 / e for e, c, _ in v) if f is not None else None
    med[name] = (ns, net)
    print(f"{name:<40} {ns:>12.0f} {('%.0f' % net) if net is not None else '-':>12} {statistics.median(l for _, _, l in v):>10.0f}")
if "trace-cmd" in med:
    t = med["trace-cmd"]
    for name, (ns, net) in med.items():
        if name.startswith("kmemtraced"):
            extra = f", {net / t[1]:.2f}x net of fixed costs" if net is not None and t[1] else ""
            print(f"{name}: {ns / t[0]:.2f}x trace-cmd's CPU per event{extra}")
# The same ratio within each round (the recorders took turns on the same
# load), its median: less moved by a round whose load was heavier or lighter.
for name in med:
    if name.startswith("kmemtraced"):
        r = [v[name] / v["trace-cmd"] for v in per_round.values() if name in v and "trace-cmd" in v]
        if r:
            print(f"{name}: per round {', '.join('%.2f' % x for x in r)}; median {statistics.median(r):.2f}x")
PY
