#!/bin/bash
# What recording costs the traced workload (issue 43): one process doing
# 40,000 rounds of an open, a socket, a socket-pair message and a pipe
# message, then faulting in 200 MB of fresh anonymous pages, timed from
# inside; alone, under trace-cmd recording the kmem allocation events (4 MiB
# a CPU), and under kmemtraced in each page-stack mode: the default (a stack
# for 1 in 16 page frames), every allocation's, none. Rounds in turn, so
# that the machine's drift reaches every mode alike; prints each mode's
# median, range and slowdown over the workload alone, and the page call
# sites the default's report names.
#
#   kmemtraced/bench/workload_cost.sh [ROUNDS]     (default 7)
#   environment: BIN=dir of the release binaries (default target/release,
#                or $CARGO_TARGET_DIR/release)
#
# Needs root, tracefs, python3 and trace-cmd (through
# ../shared/tools/trace-cmd-sandboxed when present).
set -euo pipefail
rounds=${1:-7}
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN:-${CARGO_TARGET_DIR:-$root/target}/release}
tc=$root/../shared/tools/trace-cmd-sandboxed
[ -x "$tc" ] || tc=trace-cmd
for t in python3 "$tc" "$bin/kmemtraced" "$bin/kmemtrace-report"; do
  command -v "$t" >/dev/null || { echo "missing $t" >&2; exit 2; }
done
work=$(mktemp -d /tmp/kmt-workload.XXXXXX)
trap 'rm -rf "$work"' EXIT

cat >"$work/load.py" <<'PY'
import mmap, os, socket, sys, time
t = time.monotonic()
a, b = socket.socketpair()
r, w = os.pipe()
for _ in range(40000):
    fd = os.open("/proc/self/stat", os.O_RDONLY)
    os.close(fd)
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).close()
    a.send(b"x" * 256)
    b.recv(4096)
    os.write(w, b"y" * 512)
    os.read(r, 4096)
size = 200 << 20
# Private anonymous memory in base pages (no transparent huge pages): one
# page allocation per page touched.
m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
if hasattr(m, "madvise") and hasattr(mmap, "MADV_NOHUGEPAGE"):
    m.madvise(mmap.MADV_NOHUGEPAGE)
for off in range(0, size, 4096):
    m[off] = 1
m.close()
with open(sys.argv[1], "a") as f:
    f.write(f"{time.monotonic() - t:.4f}\n")
PY

# The kmem allocation events this kernel has, as kmemtraced records by
# default (kernels before 6.1 also have the two _node ones).
kmem="kmalloc kmalloc_node kmem_cache_alloc kmem_cache_alloc_node kfree kmem_cache_free
mm_page_alloc mm_page_free mm_page_free_batched mm_page_alloc_zone_locked mm_page_pcpu_drain
mm_page_alloc_extfrag"
tc_events=()
for e in $kmem; do
  [ -d "/sys/kernel/tracing/events/kmem/$e" ] && tc_events+=(-e "kmem:$e")
done
[ ${#tc_events[@]} -gt 0 ] || { echo "no kmem events in /sys/kernel/tracing (mount tracefs)" >&2; exit 2; }

modes=("alone" "trace-cmd" "kmemtraced" "kmemtraced --page-stacks all" "kmemtraced --page-stacks off")
run_mode() { # mode times-file
  case $1 in
    alone) python3 "$work/load.py" "$2" ;;
    trace-cmd) "$tc" record -q -b 4096 "${tc_events[@]}" -o "$work/tc.dat" -- python3 "$work/load.py" "$2" ;;
    kmemtraced*) # shellcheck disable=SC2086
      "$bin/kmemtraced" -q ${1#kmemtraced} -o "$work/kmt-${#1}.kmt" -- python3 "$work/load.py" "$2" ;;
  esac >/dev/null 2>&1
}
for ((r = 1; r <= rounds; r++)); do
  for i in "${!modes[@]}"; do
    run_mode "${modes[$i]}" "$work/times.$i"
  done
done

python3 - "$work" "$rounds" "${modes[@]}" <<'PY'
import statistics, sys
work, rounds, modes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
times = [sorted(float(l) for l in open(f"{work}/times.{i}")) for i in range(len(modes))]
alone = statistics.median(times[0])
tc = statistics.median(times[1]) - alone
print(f"workload: 40,000 rounds of open, socket, socket pair, pipe; 200 MB of fresh pages ({rounds} rounds in turn)")
print(f"{'':32} {'median s':>9} {'range s':>15} {'slowdown s':>11} {'vs trace-cmd':>13}")
for m, t in zip(modes, times):
    med = statistics.median(t)
    slow = med - alone
    rel = f"{slow / tc:.2f}x" if m != "alone" and tc > 0 else "-"
    print(f"{m:32} {med:9.3f} {t[0]:7.3f}-{t[-1]:<7.3f} {slow if m != 'alone' else 0:11.3f} {rel:>13}")
PY
# What the default's report says of its page call sites.
log=$(ls "$work"/kmt-10.kmt)
"$bin/kmemtrace-report" -q --json "$log" | python3 -c '
import json, sys
p = json.load(sys.stdin)["pages"]
s, rows = p["stacks"], p["callsites"]
named = [r for r in rows if r["callsite"] != "-"]
print("default (last round): %d page allocations, stacks for 1 in %s frames: %d; %d call-site rows named, the top: %s" % (
    p["allocations"]["requests"], s.get("sample", {}).get("one_in", 1), s["records"], len(named),
    ", ".join("%s %d" % (r["callsite"], r["hits"]) for r in named[:3])))'
