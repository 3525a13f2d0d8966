#!/bin/sh
# The page-allocator summary of kmemtrace-report beside perf kmem's, on one
# workload recorded by both at once: perf records system-wide while
# kmemtraced records the workload (so perf's window is a little longer:
# kmemtraced's own start and stop).
#
#   kmemtrace-report/bench/page_compare.sh [SECONDS] [OUT_DIR]
#
# Needs root, perf (linux-perf), stress-ng and the release binaries
# (cargo build --release).
set -eu
secs=${1:-4}
out=${2:-/tmp/kmt-page-compare}
bin=$(cd "$(dirname "$0")/../.." && pwd)/target/release
mkdir -p "$out"
rm -f "$out/perf.data" "$out/k.kmt"
perf kmem --page record -o "$out/perf.data" -- \
  "$bin/kmemtraced" -q -o "$out/k.kmt" -- \
  stress-ng --quiet --fork 2 --vm 1 --vm-bytes 64M --timeout "${secs}s" >/dev/null 2>"$out/perf-record.log"
perf kmem --page -i "$out/perf.data" stat >"$out/perf.txt" 2>/dev/null || true
"$bin/kmemtrace-report" -q --json "$out/k.kmt" >"$out/k.json"
python3 - "$out" <<'PY'
import json, re, sys
out = sys.argv[1]
perf = open(f"{out}/perf.txt").read()
k = json.load(open(f"{out}/k.json"))["pages"]
def pf(label):
    m = re.search(re.escape(label) + r"\s*:\s*(\d+)\s*\[\s*(\d+) KB", perf)
    return (int(m.group(1)), int(m.group(2))) if m else (None, None)
rows = [
    ("allocation requests", "Total allocation requests", k["allocations"]),
    ("free requests", "Total free requests", k["frees"]),
    ("alloc+freed", "Total alloc+freed requests", k["alloc_freed"]),
    ("alloc-only", "Total alloc-only requests", k["alloc_only"]),
    ("free-only", "Total free-only requests", k["free_only"]),
]
print(f"{'':22} {'kmemtrace-report':>18} {'KB':>10}   {'perf kmem --page':>18} {'KB':>10}")
for name, label, mine in rows:
    n, kb = pf(label)
    print(f"{name:22} {mine['requests']:>18,} {mine['bytes']//1024:>10,}   {n if n is not None else '-':>18} {kb if kb is not None else '-':>10}")
print()
print("order x migratetype (allocations):")
print("  kmemtrace-report, the recorded kernel's names:", ", ".join(f"{i}={n}" for i, n in enumerate(k["migratetypes"])))
for r in k["by_order_migratetype"]:
    print(f"    order {r['order']:>3}: " + "  ".join(f"{k['migratetypes'][i] if i < len(k['migratetypes']) else i}={n}" for i, n in enumerate(r["by_migratetype"]) if n))
print("  perf kmem --page (its fixed table):")
table = perf.split("Order", 1)[1] if "Order" in perf else ""
for line in ("Order" + table).splitlines()[:14]:
    if line.strip() and not set(line.strip()) <= set("- "):
        print("    " + line)
print()
print("perf's columns are the pre-4.4 migratetype order (Unmovable, Reclaimable, Movable,")
print("Reserved): on 4.4+ kernels its 'Reclaimable' column holds Movable pages.")
print("perf records system-wide for kmemtraced's whole run (start-up and stop included),")
print("kmemtraced from its own start to its stop: perf's counts are a little higher.")
PY
