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
bin=${CARGO_TARGET_DIR:-$(cd "$(dirname "$0")/../.." && pwd)/target}/release
mkdir -p "$out"
rm -f "$out/perf.data" "$out/k.kmt"
perf kmem --page record -o "$out/perf.data" -- \
  "$bin/kmemtraced" -q -o "$out/k.kmt" -- \
  stress-ng --quiet --fork 2 --vm 1 --vm-bytes 64M --timeout "${secs}s" >/dev/null 2>"$out/perf-record.log"
# perf's own failures are shown, not taken for empty tables (perf 6.1
# stops with "failed to process type: 68 [Cannot allocate memory]" on some
# loads).
for run in "stat:perf.txt" "--caller stat:perf-caller.txt"; do
  args=${run%%:*} file=${run#*:}
  # shellcheck disable=SC2086
  if ! perf kmem --page -i "$out/perf.data" $args >"$out/$file" 2>"$out/$file.err" ||
     ! grep -q . "$out/$file"; then
    echo "perf kmem --page $args failed:" >&2
    tail -n 3 "$out/$file.err" >&2
  fi
done
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

# Call sites: perf kmem stat --page --caller beside kmemtrace-report --page --caller.
print()
rows = []
for line in open(f"{out}/perf-caller.txt"):
    f = [x.strip() for x in line.split("|")]
    if len(f) == 6 and f[0].isdigit():
        rows.append((int(f[0]), int(f[1]), f[2], f[3], f[4], f[5]))
ours = k["callsites"]
def sites(names):
    return len(set(names))
print(f"{'call sites':22} {'kmemtrace-report':>18}   {'perf kmem --page':>18}")
print(f"{'rows':22} {len(ours):>18,}   {len(rows):>18,}")
print(f"{'distinct call sites':22} {sites(r['callsite'] for r in ours):>18,}   {sites(r[5] for r in rows):>18,}")
print(f"{'hits in the table':22} {sum(r['hits'] for r in ours):>18,}   {sum(r[1] for r in rows):>18,}")
hex_named = sum(1 for r in rows if re.fullmatch(r"[0-9a-f]+", r[5]))
print(f"{'sites left as numbers':22} {sum(1 for r in ours if r['callsite'] == '-' or r['callsite'].startswith('0x')):>18,}   {hex_named:>18,}")
print()
print("top call sites by KB, kmemtrace-report (first frame outside the allocator, named from the log's kallsyms):")
for r in ours[:8]:
    print(f"  {r['bytes']//1024:>10,} KB {r['hits']:>9,} hits  order {r['order']} {r['migratetype']:<12} {r['callsite']}")
print("top call sites by KB, perf kmem stat --page --caller:")
for r in rows[:8]:
    print(f"  {r[0]:>10,} KB {r[1]:>9,} hits  order {r[2]} {r[3]:<12} {r[5]}")
print()
print("perf takes the first callchain entry its regex ^_?_?(alloc|get_free|get_zeroed)_pages? does not")
print("match; on 6.x kernels the allocator's own __alloc_frozen_pages_noprof, alloc_pages_mpol and")
print("folio_alloc* escape it, and where perf cannot map the kernel's text (here) it prints the raw")
print("address. Its Mig.type column uses the pre-4.4 table (RECLAIM holds Movable pages).")
PY
