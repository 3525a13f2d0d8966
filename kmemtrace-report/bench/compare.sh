#!/bin/bash
# Benchmark: kmemtrace-report beside `perf kmem stat` and `trace-cmd report`
# on captures of the same stress-ng workload, each recorded by its own tool.
#
#   kmemtrace-report/bench/compare.sh [SECONDS] [WORKDIR]
#   REUSE=1 kmemtrace-report/bench/compare.sh 0 WORKDIR   # time again only
#
# Needs root, tracefs, stress-ng, perf (linux-perf), trace-cmd and GNU time
# (`apt-get install stress-ng linux-perf trace-cmd time`). Builds the
# release binaries, unless BIN names a directory that holds them. Prints, per tool, the events it processed, wall time,
# events per second and peak RSS (from /usr/bin/time -v), then ratios.
set -euo pipefail

secs=${1:-5}
work=${2:-$(mktemp -d /tmp/kmt-bench.XXXXXX)}
here=$(cd "$(dirname "$0")/../.." && pwd)
events=(kmalloc kfree kmem_cache_alloc kmem_cache_free)
workload=(stress-ng --fork 1 --pipe 1 --timeout "${secs}s" --quiet)
trace_cmd=${TRACE_CMD:-$here/../shared/tools/trace-cmd-sandboxed}
[ -x "$trace_cmd" ] || trace_cmd=trace-cmd

for t in stress-ng perf trace-cmd /usr/bin/time; do
  command -v "$t" >/dev/null || { echo "missing $t (apt-get install stress-ng linux-perf trace-cmd time)" >&2; exit 2; }
done
if [ -z "${BIN:-}" ]; then
  (cd "$here" && cargo build --release -q -p kmemtraced -p kmemtrace-report)
fi
kmt=${BIN:-${CARGO_TARGET_DIR:-$here/target}/release}/kmemtraced
report=${BIN:-${CARGO_TARGET_DIR:-$here/target}/release}/kmemtrace-report
mkdir -p "$work" && cd "$work"
echo "workdir: $work; workload: ${workload[*]}"

# 1. Record the workload three times, once per tool (REUSE=1: keep the
#    captures already in WORKDIR).
if [ "${REUSE:-}" != 1 ]; then
  "$kmt" -q -o stress.kmt -b 65536 -e "$(IFS=,; echo "${events[*]}")" -- "${workload[@]}" 2>kmt.log || cat kmt.log >&2
  perf_ev=(); for e in "${events[@]}"; do perf_ev+=(-e "kmem:$e"); done
  perf record -q -m 4096 -a "${perf_ev[@]}" -o perf.data -- "${workload[@]}" 2>perf-record.log
  tc_ev=(); for e in "${events[@]}"; do tc_ev+=(-e "kmem:$e"); done
  "$trace_cmd" record -q -b 65536 "${tc_ev[@]}" -o trace.dat "${workload[@]}" >tc-record.log 2>&1
fi

# 2. Events each capture holds (not timed).
n_kmt=$("$report" -q --json stress.kmt | python3 -c 'import json,sys; print(json.load(sys.stdin)["capture"]["events"])')
n_perf=$(perf script -i perf.data -F event 2>/dev/null | wc -l)
n_tc=$(trace-cmd report -i trace.dat 2>/dev/null | grep -c -E ': (kmalloc|kfree|kmem_cache_alloc|kmem_cache_free):' || true)

# 3. Time the analyses. CPU time (user + sys) is given beside wall time:
# on a shared machine it is the steadier figure.
measure() { # name events cmd...
  local name=$1 n=$2; shift 2
  local f
  f="time-$(echo "$name" | tr -c 'A-Za-z0-9\n' '_').txt"
  /usr/bin/time -v "$@" >/dev/null 2>"$f" || true
  python3 - "$name" "$n" "$f" <<'EOF'
import re, sys
name, n, f = sys.argv[1], int(sys.argv[2]), sys.argv[3]
t = open(f).read()
def field(label):
    return re.search(re.escape(label) + r": (.*)", t).group(1).strip()
w = field("Elapsed (wall clock) time (h:mm:ss or m:ss)").split(":")
wall = sum(float(x) * 60 ** i for i, x in enumerate(reversed(w)))
cpu = float(field("User time (seconds)")) + float(field("System time (seconds)"))
rss = int(field("Maximum resident set size (kbytes)"))
eps = n / wall if wall > 0 else float("inf")
epc = n / cpu if cpu > 0 else float("inf")
print(f"{name:<32} {n:>11,} events {wall:>7.2f} s {eps:>12,.0f} ev/s  CPU {cpu:>6.2f} s {epc:>12,.0f} ev/CPU-s  {rss:>9,} KiB peak RSS")
open("results.tsv", "a").write(f"{name}\t{n}\t{wall}\t{eps}\t{rss}\t{cpu}\t{epc}\n")
EOF
}
rm -f results.tsv
echo
measure "kmemtrace-report" "$n_kmt" "$report" -q stress.kmt
measure "kmemtrace-report --json --alloc" "$n_kmt" "$report" -q --json --alloc stress.kmt
measure "perf kmem stat --caller --alloc" "$n_perf" perf kmem stat --caller --alloc -i perf.data
measure "trace-cmd report" "$n_tc" trace-cmd report -i trace.dat
echo
python3 - <<'EOF'
rows = [l.rstrip("\n").split("\t") for l in open("results.tsv")]
d = {r[0]: (float(r[3]), int(r[4]), float(r[6])) for r in rows}
k = d["kmemtrace-report"]
for other in ("perf kmem stat --caller --alloc", "trace-cmd report"):
    o = d[other]
    print(f"vs {other}: {k[0]/o[0]:.1f}x the events/s (wall), {k[2]/o[2]:.1f}x the events per CPU-second, {o[1]/k[1]:.1f}x less peak RSS")
EOF
