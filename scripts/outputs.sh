#!/bin/sh
# Writes every output of the five programs on the committed captures and
# the foreign dumps and trace.dat files into one folder, so that a change
# meant to keep the outputs can be checked with `diff -r` against the same
# run from before it:
#   scripts/outputs.sh BIN_DIR OUT_DIR
# BIN_DIR holds kmemtrace-{report,check,export,diff} (target/release).
set -u
bin=$(cd "$1" && pwd)
out=$2
root=$(cd "$(dirname "$0")/.." && pwd)
shared=${KMT_SHARED:-$root/../shared/data}
mkdir -p "$out"
out=$(cd "$out" && pwd)
inputs="$out/inputs"
mkdir -p "$inputs"
cd "$inputs"

# The inputs: committed logs, then the foreign dumps and trace.dat files.
for f in "$root"/tests/data/*.kmt; do
    ln -sf "$f" "$(basename "$f")"
done
for a in armhf s390x; do
    for d in raw raw_overflow; do
        [ -d "$shared/$a/$d" ] && ln -sfn "$shared/$a/$d" "$a-$d"
    done
    for t in trace.dat trace.v6.dat; do
        [ -f "$shared/$a/tracecmd/$t" ] && ln -sf "$shared/$a/tracecmd/$t" "$a-$t"
    done
done

run() { # name, then the command; stdout, stderr and status kept
    name=$1
    shift
    "$@" >"$out/$name.out" 2>"$out/$name.err"
    echo $? >"$out/$name.rc"
}

# Names relative to the inputs folder, so that outputs do not name it.
for p in *; do
    n=$p
    r="$bin/kmemtrace-report -q -j 2"
    run "$n.report" $r "$p"
    run "$n.report-json" $r --json "$p"
    run "$n.report-all" $r --caller --caches --matrix --alloc --leaks --misuse --page --live -l 0 "$p"
    run "$n.report-stacks" $r --page --live --stacks --cull pid,comm "$p"
    run "$n.events" $r --events "$p"
    run "$n.html" $r --html "../$n.html" "$p"
    run "$n.check" "$bin/kmemtrace-check" "$p"
    run "$n.check-json" "$bin/kmemtrace-check" --json "$p"
    run "$n.export-dat7" "$bin/kmemtrace-export" -q -o "../$n.v7.dat" "$p"
    run "$n.export-dat6" "$bin/kmemtrace-export" -q --trace-dat-version 6 -o "../$n.v6.dat" "$p"
    run "$n.export-perfetto" "$bin/kmemtrace-export" -q --to perfetto -o "../$n.pftrace" "$p"
    run "$n.export-parquet" "$bin/kmemtrace-export" -q --to parquet -o "../$n.parquet" "$p"
done
d="$bin/kmemtrace-diff"
run diff "$d" "board-arm64.kmt" "board-armhf.kmt"
run diff-json "$d" --json "board-arm64.kmt" "board-armhf.kmt" "sample-x86_64.kmt"
run diff-dumps "$d" --all "armhf-raw" "s390x-raw"
cd "$out" && rm -rf "$inputs"
# The HTML page names its file; everything else must match to the byte.
