#!/bin/bash
# Benchmark: `kmemtrace-export --to parquet` beside `kmemtrace-report` on
# the same log (the export runs the report's analysis for its call-site
# table, so the report is the yardstick), and the export at -j 1.
#
#   kmemtrace-export/bench/parquet.sh [LOG] [RUNS]
#
# Without LOG, records 6 s of `stress-ng --fork 2 --vm 1 --open 1` (needs
# root, tracefs, stress-ng). Needs hyperfine and GNU time. Builds the
# release binaries. Prints wall and CPU time (hyperfine), peak RSS (GNU
# time) and the files' size.
set -euo pipefail

here=$(cd "$(dirname "$0")/../.." && pwd)
runs=${2:-4}
for t in hyperfine /usr/bin/time python3; do
  command -v "$t" >/dev/null || { echo "missing $t (apt-get install hyperfine time)" >&2; exit 2; }
done
(cd "$here" && cargo build --release -q -p kmemtraced -p kmemtrace-report -p kmemtrace-export)
bin=${CARGO_TARGET_DIR:-$here/target}/release
work=$(mktemp -d /tmp/kmt-parquet.XXXXXX)
trap 'rm -rf "$work"' EXIT
log=${1:-}
if [ -z "$log" ]; then
  command -v stress-ng >/dev/null || { echo "missing stress-ng" >&2; exit 2; }
  log=$work/stress.kmt
  "$bin/kmemtraced" -q -b 8192 -o "$log" -- stress-ng --fork 2 --vm 1 --vm-bytes 32M --open 1 -t 6 --quiet
fi
echo "log: $log ($(du -h "$log" | cut -f1)), $(nproc) cores"
out=$work/out
hyperfine -w 1 -r "$runs" --export-json "$work/h.json" --prepare "rm -rf $out" \
  -n export "$bin/kmemtrace-export $log --to parquet -o $out" \
  -n "export -j 1" "$bin/kmemtrace-export $log --to parquet -j 1 -o $out" \
  -n report "$bin/kmemtrace-report $log" >/dev/null
rss() { /usr/bin/time -f %M "$@" 2>&1 >/dev/null | tail -1; }
rm -rf "$out"; rss_export=$(rss "$bin/kmemtrace-export" "$log" --to parquet -o "$out")
files=$(du -sb "$out" | cut -f1)
rm -rf "$out"; rss_one=$(rss "$bin/kmemtrace-export" "$log" --to parquet -j 1 -o "$out")
rss_report=$(rss "$bin/kmemtrace-report" "$log")
python3 - "$work/h.json" "$rss_export" "$rss_one" "$rss_report" "$files" <<'PY'
import json, sys
h = json.load(open(sys.argv[1]))["results"]
rss = dict(zip(["export", "export -j 1", "report"], sys.argv[2:5]))
print(f"{'':12} {'wall s (min-max)':>18} {'CPU s':>7} {'peak RSS MB':>12}")
for r in h:
    cpu = r["user"] + r["system"]
    print(f"{r['command']:12} {r['min']:8.2f}-{r['max']:<8.2f} {cpu:7.2f} {int(rss[r['command']]) / 1024:12.0f}")
t = {r["command"]: r["mean"] for r in h}
print(f"export / report: {t['export'] / t['report']:.2f}x the time; files {int(sys.argv[5]) / 1e6:.1f} MB")
PY
