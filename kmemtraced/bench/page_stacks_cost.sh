#!/bin/sh
# What the kernel stacks taken with page allocations cost the traced
# workload: one page-heavy load (faults in 8 x 64 MiB, 200 exec's), timed
# from inside, untraced; under kmemtraced with and without --page-stacks;
# under perf kmem --page record (which always takes callchains); under
# trace-cmd with mm_page_alloc and its stack (-T). Prints the workload's
# time (median of RUNS) and the file each tool wrote.
#
#   kmemtraced/bench/page_stacks_cost.sh [RUNS] [OUT_DIR]
#
# Needs root, the release binaries (cargo build --release), perf
# (linux-perf) and trace-cmd (through ../shared/tools/trace-cmd-sandboxed
# when present).
set -eu
runs=${1:-3}
out=${2:-/tmp/kmt-page-stacks-cost}
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN:-${CARGO_TARGET_DIR:-$root/target}/release}
tc=$root/../shared/tools/trace-cmd-sandboxed
[ -x "$tc" ] || tc=trace-cmd
mkdir -p "$out"
cat >"$out/load.sh" <<'LOAD'
#!/bin/sh
s=$(date +%s%N)
i=0; while [ $i -lt 8 ]; do dd if=/dev/zero of=/dev/null bs=64M count=1 status=none; i=$((i+1)); done
i=0; while [ $i -lt 200 ]; do /bin/true; i=$((i+1)); done
e=$(date +%s%N)
echo $(( (e - s) / 1000000 )) >>"$MS_FILE"
LOAD
chmod +x "$out/load.sh"
export MS_FILE
median() { sort -n "$1" | sed -n "$(( ($(wc -l <"$1") + 1) / 2 ))p"; }
measure() { # name file command...
    name=$1; file=$2; shift 2
    MS_FILE=$out/$name.ms; : >"$MS_FILE"
    i=0; while [ $i -lt "$runs" ]; do "$@" >/dev/null 2>&1; i=$((i+1)); done
    size=-; [ -n "$file" ] && [ -f "$file" ] && size=$(( $(stat -c %s "$file") / 1024 ))
    printf '%-44s %8s ms %10s KiB\n' "$name" "$(median "$MS_FILE")" "$size"
}
printf '%-44s %11s %14s\n' "workload (median of $runs)" "time" "file"
measure untraced "" "$out/load.sh"
measure "kmemtraced --page-stacks off" "$out/off.kmt" "$bin/kmemtraced" -q -o "$out/off.kmt" --page-stacks off -- "$out/load.sh"
measure "kmemtraced (1 in 16 frames, the default)" "$out/on.kmt" "$bin/kmemtraced" -q -o "$out/on.kmt" -- "$out/load.sh"
measure "kmemtraced --page-stacks all" "$out/all.kmt" "$bin/kmemtraced" -q -o "$out/all.kmt" --page-stacks all -- "$out/load.sh"
measure "perf kmem --page record" "$out/perf.data" perf kmem --page record -o "$out/perf.data" -- "$out/load.sh"
measure "trace-cmd record -e kmem:mm_page_alloc -T" "$out/tc.dat" "$tc" record -q -e kmem:mm_page_alloc -T -o "$out/tc.dat" -- "$out/load.sh"
"$bin/kmemtrace-report" -q --json "$out/on.kmt" | python3 -c '
import json, sys
p = json.load(sys.stdin)["pages"]
print("kmemtraced: %d page allocations, %d stacks (1 in %s frames), all matched: %s" % (
    p["allocations"]["requests"], p["stacks"]["records"], p["stacks"].get("sample", {}).get("one_in", 1),
    p["stacks"]["records"] == p["stacks"]["matched"]))'
