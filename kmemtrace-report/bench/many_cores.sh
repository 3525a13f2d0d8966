#!/bin/bash
# Scaling with cores (issue 11's 16-core targets, issue 16's export cost):
# records a load on every CPU of this machine, then times kmemtrace-check,
# kmemtrace-report at -j 1, 2, 4, ... up to the cores, and the Parquet
# export, on that one log; checks that the report's JSON is the same at
# every -j; prints one table (and writes it to $OUT/many_cores.txt when OUT
# is set, as on the device machine). Then the prediction for PREDICT cores
# (default 16) from a run here with as many threads (`--timings`, the
# critical path), beside the measured 1-core rate: on a machine with fewer
# cores, what the one with PREDICT would do; on one with PREDICT, the model
# beside the measurement.
#
#   kmemtrace-report/bench/many_cores.sh [SECONDS] [LOG]
#     SECONDS  length of the load (default 10)
#     LOG      time this log instead of recording one
#   environment: BIN=dir with the release binaries (default target/release,
#                or $CARGO_TARGET_DIR/release; nothing is built, so it
#                runs where cargo is missing);
#                RUNS=timed runs per command (default 2, the faster kept);
#                KEEP_LOG=file keeps a copy of the recorded log there (to
#                analyse a many-CPU capture on another machine);
#                PREDICT=cores to predict (default 16).
#
# On the device machine (a copy of the tree, 64 MiB carried at most): build
# here, strip into an ignored directory and carry it:
#   cargo build --release && mkdir -p target/bench-bin && for b in kmemtraced \
#     kmemtrace-check kmemtrace-report kmemtrace-export; do strip -o \
#     target/bench-bin/$b target/release/$b; done
#   run: BIN=target/bench-bin kmemtrace-report/bench/many_cores.sh 10
#        (carry: target/bench-bin)
#
# Needs root and tracefs to record, and python3 (the load and the timing:
# GNU time, perf and stress-ng may be missing). The load is Python
# processes, one per CPU, each forking, opening files, sending on socket
# pairs and pipes in a loop: the fork/open/socket/pipe mix of issue 11.
set -euo pipefail

here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN:-${CARGO_TARGET_DIR:-$here/target}/release}
secs=${1:-10}
log=${2:-}
runs=${RUNS:-2}
cores=$(nproc)
for b in kmemtraced kmemtrace-check kmemtrace-report kmemtrace-export; do
  [ -x "$bin/$b" ] || { echo "missing $bin/$b: cargo build --release first" >&2; exit 2; }
done
command -v python3 >/dev/null || { echo "missing python3" >&2; exit 2; }
work=$(mktemp -d /tmp/kmt-cores.XXXXXX)
trap 'rm -rf "$work"' EXIT

if [ -z "$log" ]; then
  log=$work/load.kmt
  cat >"$work/load.py" <<'PY'
import os, socket, sys, time
from multiprocessing import Process

def worker(until):
    a, b = socket.socketpair()
    r, w = os.pipe()
    while time.monotonic() < until:
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        for _ in range(20):
            fd = os.open("/proc/self/stat", os.O_RDONLY)
            os.read(fd, 512)
            os.close(fd)
            a.send(b"x" * 256)
            b.recv(4096)
            os.write(w, b"y" * 512)
            os.read(r, 4096)

if __name__ == "__main__":
    until = time.monotonic() + float(sys.argv[1])
    ps = [Process(target=worker, args=(until,)) for _ in range(os.cpu_count())]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
PY
  # 16 MiB per CPU: the Python load is light enough that no event is lost.
  "$bin/kmemtraced" -q -b 16384 -o "$log" -- python3 "$work/load.py" "$secs"
  [ -z "${KEEP_LOG:-}" ] || cp "$log" "$KEEP_LOG"
fi

# time_it NAME CMD...: the fastest of $runs runs: wall s, CPU s, peak RSS
# MB (of the command's process tree: getrusage of the children).
cat >"$work/timeit.py" <<'PY'
import os, resource, subprocess, sys, time
runs, name, cmd = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
best = None
for _ in range(runs):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.monotonic()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.monotonic() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if best is None or wall < best[0]:
        best = (wall, cpu)
# ru_maxrss of the children is the largest any of them reached (KiB).
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(f"{name}\t{best[0]:.3f}\t{best[1]:.2f}\t{rss:.0f}")
PY
time_it() { python3 "$work/timeit.py" "$runs" "$@" >>"$work/rows.tsv"; }

events=$("$bin/kmemtrace-check" --json "$log" | python3 -c \
  'import json,sys; d=json.load(sys.stdin)["files"][0]; print(d["total"]["events"])')
# The 1-core rate: the report held to one CPU (its -j 1 still runs a
# decoder beside its analysis thread).
if command -v taskset >/dev/null; then
  time_it "report, 1 core (taskset)" taskset -c 0 "$bin/kmemtrace-report" -q -j 1 "$log"
fi
time_it "check -j 1" "$bin/kmemtrace-check" -q -j 1 "$log"
time_it "check -j $cores" "$bin/kmemtrace-check" -q -j "$cores" "$log"
j=1
while [ "$j" -le "$cores" ]; do
  time_it "report -j $j" "$bin/kmemtrace-report" -q -j "$j" "$log"
  "$bin/kmemtrace-report" -q -j "$j" --json "$log" | python3 -c \
    'import json,sys; d=json.load(sys.stdin); d.pop("generator",None); print(json.dumps(d, sort_keys=True))' \
    | sha256sum | cut -c1-16 >"$work/json.$j"
  [ "$j" -lt "$cores" ] && [ $((j * 2)) -gt "$cores" ] && j=$cores || j=$((j * 2))
done
time_it "export parquet -j $cores" "$bin/kmemtrace-export" "$log" --to parquet -j "$cores" -o "$work/pq"
predict=${PREDICT:-16}
"$bin/kmemtrace-report" -q -j "$predict" --timings="$predict" "$log" 2>"$work/timings.txt" >/dev/null

same=yes
[ "$(sort -u "$work"/json.* | wc -l)" = 1 ] || same=no
python3 - "$work/rows.tsv" "$events" "$cores" "$log" "$same" "$work/timings.txt" "$predict" <<'PY' | tee "${OUT:-$work}/many_cores.txt"
import os, re, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
events, cores, log, same = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
timings, predict = open(sys.argv[6]).read(), int(sys.argv[7])
print(f"log: {events:,} events, {os.path.getsize(log) / 1e6:.0f} MB; {cores} cores")
print(f"{'':28} {'wall s':>8} {'CPU s':>8} {'M events/s':>11} {'peak RSS MB':>12}")
wall = {}
for name, w, c, rss in rows:
    wall[name] = float(w)
    print(f"{name:28} {float(w):8.2f} {float(c):8.2f} {events / float(w) / 1e6:11.1f} {float(rss):12.0f}")
one = wall.get("report, 1 core (taskset)", wall.get("report -j 1"))
full = wall.get(f"report -j {cores}")
if one and full:
    print(f"report: {one / full:.1f}x the 1-core rate on {cores} cores (issue 11: at least 8x and 80 M events/s on 16)")
ex = wall.get(f"export parquet -j {cores}")
if ex and full:
    print(f"export / report: {ex / full:.2f}x the time (issue 16: at most 1x)")
print(f"report JSON the same at every -j: {same}")
print(f"where the time went at -j {predict} (kmemtrace-report --timings):")
print(timings.rstrip())
m = re.search(r"predicted on \d+ cores: ([0-9.]+) s", timings)
if m and one:
    p = float(m.group(1))
    print(f"predicted on {predict} cores: {events / p / 1e6:.1f} M events/s, {one / p:.1f}x the "
          f"1-core rate measured here (goals: at least 8x and 80 M events/s on 16)")
PY
