#!/bin/bash
# Benchmark: kmemtrace-report beside `perf kmem stat` and `trace-cmd report`
# on captures of the same stress-ng workload, each recorded by its own tool.
#
#   kmemtrace-report/bench/compare.sh [SECONDS] [WORKDIR]
#
# Needs root, tracefs, stress-ng, perf (linux-perf), trace-cmd and GNU time
# (`apt-get install stress-ng linux-perf trace-cmd time`). Builds the
# release binaries. Prints, per tool, the events it processed, wall time,
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
(cd "$here" && cargo build --release -q -p kmemtraced -p kmemtrace-report)
kmt=$here/target/release/kmemtraced
report=$here/target/release/kmemtrace-report
mkdir -p "$work" && cd "$work"
echo "workdir: $work; workload: ${workload[*]}"

# 1. Record the workload three times, once per tool.
"$kmt" -q -o stress.kmt -b 65536 -e "$(IFS=,; echo "${events[*]}")" -- "${workload[@]}" 2>kmt.log || cat kmt.log >&2
perf_ev=(); for e in "${events[@]}"; do perf_ev+=(-e "kmem:$e"); done
perf record -q -m 4096 -a "${perf_ev[@]}" -o perf.data -- "${workload[@]}" 2>perf-record.log
tc_ev=(); for e in "${events[@]}"; do tc_ev+=(-e "kmem:$e"); done
"$trace_cmd" record -q -b 65536 "${tc_ev[@]}" -o trace.dat "${workload[@]}" >tc-record.log 2>&1

# 2. Events each capture holds (not timed).
n_kmt=$("$report" -q --json stress.kmt | python3 -c 'import json,sys; print(json.load(sys.stdin)["capture"]["events"])')
n_perf=$(perf script -i perf.data -F event 2>/dev/null | wc -l)
n_tc=$(trace-cmd report -i trace.dat 2>/dev/null | grep -c -E ': (kmalloc|kfree|kmem_cache_alloc|kmem_cache_free):' || true)

# 3. Time the analyses.
measure() { # name events cmd...
  local name=$1 n=$2; shift 2
  /usr/bin/time -v "$@" >/dev/null 2>"time-$name.txt" || true
  local wall rss
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "time-$name.txt" | awk -F: '{ if (NF==3) print $1*3600+$2*60+$3; else print $1*60+$2 }')
  rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "time-$name.txt")
  python3 - "$name" "$n" "$wall" "$rss" <<'EOF'
import sys
name, n, wall, rss = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
eps = n / wall if wall > 0 else float("inf")
print(f"{name:<34} {n:>12,} events {wall:>8.2f} s {eps:>14,.0f} events/s {rss:>10,} KiB peak RSS")
open("results.tsv", "a").write(f"{name}\t{n}\t{wall}\t{eps}\t{rss}\n")
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
d = {r[0]: (float(r[3]), int(r[4])) for r in rows}
k = d["kmemtrace-report"]
for other in ("perf kmem stat --caller --alloc", "trace-cmd report"):
    o = d[other]
    print(f"vs {other}: {k[0]/o[0]:.1f}x the events/s, {k[1]/o[1]:.2f}x the peak RSS ({o[1]/k[1]:.1f}x less)")
EOF
