#!/bin/bash
# A fuzzing campaign over every parser of untrusted bytes (fuzz/):
#   scripts/fuzz.sh [--runs N | --seconds S] [--jobs J] [--asan] [--no-build] [TARGET...]
#
# Builds the targets with cargo-fuzz (a nightly compiler; `cargo install
# cargo-fuzz`), cuts the seed corpora from the real captures (fuzz-seeds,
# and trace.dat files and report documents written by the release
# programs), then runs each target from its corpus to N runs (default ten
# million) or for S seconds, J targets at a time (default: the CPUs).
# Corpora stay in fuzz/corpus/TARGET between campaigns, so a campaign goes
# on where the last one stopped; what crashes goes to fuzz/artifacts/TARGET.
#
# Prints, per target: runs, runs a second, coverage (edges and features
# at the end), corpus entries, peak RSS, and the crash, hang or
# out-of-memory input if there is one. Exit status 1 if any target found
# one. Each run is limited to 10 s (a hang) and 2 GiB (unbounded
# allocation); libFuzzer's own logs are kept in fuzz/logs/TARGET.log.
#
# Built without a sanitizer by default: the parsers forbid unsafe code, so
# ASan checks only zstd's and the standard library's, for a slower
# campaign; --asan builds with it. Overflow checks are always on.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
all="log_reader kpack subbuf event_format metadata check report tracedat dump diff"
runs=10000000
seconds=
jobs=$(nproc)
sanitizer=none
build=1
targets=
while [ $# -gt 0 ]; do
    case $1 in
    --runs) runs=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --asan) sanitizer=address; shift ;;
    --no-build) build=; shift ;;
    -h | --help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets="$targets $1"; shift ;;
    esac
done
targets=${targets:-$all}
for t in $targets; do
    case " $all " in *" $t "*) ;; *) echo "fuzz.sh: no target $t (targets: $all)" >&2; exit 2 ;; esac
done

target_dir=${CARGO_TARGET_DIR:-$root/target}
fuzz_dir=$root/fuzz
# cargo-fuzz builds for the host, into a folder named after its triple.
bin=$target_dir/fuzz/$(rustc -vV | sed -n 's/^host: //p')/release
rel=$target_dir/release
if [ -n "$build" ]; then
    for t in $targets; do
        (cd "$fuzz_dir" && CARGO_TARGET_DIR=$target_dir/fuzz \
            cargo +nightly fuzz build -O -a -s "$sanitizer" "$t")
    done
    (cd "$root" && cargo build -q --release -p kmemtrace-report -p kmemtrace-export \
        && cargo build -q -p kmemtrace-testkit --bin fuzz-seeds)
fi

# Seeds: cut from the real captures into a folder of this campaign's own
# (cut each time: cheap; so campaigns of other targets can run beside it),
# while the corpora the campaigns grew stay in fuzz/corpus.
seeds=$(mktemp -d "${TMPDIR:-/tmp}/kmt-fuzz-seeds.XXXXXX")
gates=$(mktemp)
trap 'rm -rf "$seeds" "$gates"' EXIT
shared=$root/../shared/data
# Without them the dump target has no seed at all and starts from nothing.
[ -d "$shared" ] || echo "fuzz.sh: no $shared: no seeds from the foreign captures (their dumps and trace.dat files)" >&2
"$target_dir/debug/fuzz-seeds" "$root" "$seeds"
mkdir -p "$seeds/tracedat" "$seeds/diff"
# The three kinds of rule the diff's help shows, and an allow_no_match one.
printf '%s\n' '[[gate]]' 'metric = "hits"' 'callsite = "alloc_pipe_info*"' \
    'max_increase_pct = 20' '[[gate]]' 'metric = "misuse:double_free"' 'max = 0' \
    '[[gate]]' 'metric = "stall_p99_ns"' 'stall_site = "filemap_add_folio order 0"' \
    'max_increase_pct = 50' '[[gate]]' 'metric = "bytes"' 'cache = "kmalloc-?k"' \
    'per_second = true' 'allow_no_match = true' 'max_increase = 100' > "$gates"
compact() {
    python3 -c 'import json, sys; json.dump(json.load(open(sys.argv[1])), sys.stdout, separators=(",", ":"))' "$1"
}
for log in "$root"/format-spec/test-vectors/*.kmt; do
    name=$(basename "$log" .kmt)
    for v in 6 7; do
        "$rel/kmemtrace-export" --to trace-dat --trace-dat-version $v \
            -o "$seeds/tracedat/$name.v$v.dat" "$log" >/dev/null 2>&1 || true
    done
    rm -f "$seeds/tracedat/"*.old
    # Exit 5 (damaged) still writes the document.
    if "$rel/kmemtrace-report" --json "$log" > "$seeds/diff/doc.json" 2>/dev/null \
        || [ -s "$seeds/diff/doc.json" ]; then
        { cat "$gates"; printf '\0'; compact "$seeds/diff/doc.json"; } > "$seeds/diff/$name"
    fi
    rm -f "$seeds/diff/doc.json"
done
# Real trace-cmd files from other kernels, cut to their head (the metadata
# and the first CPU pages): the reader must cope with the cut as well.
for a in armhf s390x; do
    for t in trace.dat trace.v6.dat; do
        f=$shared/$a/tracecmd/$t
        [ -f "$f" ] && head -c 131072 "$f" > "$seeds/tracedat/$a-$t"
    done
done

# The longest input each target is given: its seeds' size, with room.
max_len() {
    case $1 in
    subbuf | kpack | metadata | event_format) echo 65536 ;;
    *) echo 262144 ;;
    esac
}

logs=$fuzz_dir/logs
mkdir -p "$logs"
run_one() {
    local t=$1
    local corpus=$fuzz_dir/corpus/$t art=$fuzz_dir/artifacts/$t/
    mkdir -p "$corpus" "$art"
    local limit="-runs=$runs"
    [ -n "$seconds" ] && limit="-max_total_time=$seconds"
    local seed_dir=$seeds/$t
    [ -d "$seed_dir" ] || seed_dir=
    "$bin/$t" "$corpus" $seed_dir $limit -max_len="$(max_len "$t")" -timeout=10 \
        -rss_limit_mb=2048 -malloc_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$art" > "$logs/$t.log" 2>&1 || true
}
export -f run_one max_len
export bin fuzz_dir seeds runs seconds logs

echo "$targets" | tr ' ' '\n' | grep . | xargs -P "$jobs" -I{} bash -c 'run_one {}'

status=0
printf '%-13s %12s %9s %8s %8s %7s %8s  %s\n' target runs runs/s cov ft corpus rss_mb found
for t in $targets; do
    l=$logs/$t.log
    stat() { sed -n "s/^stat::$1: *//p" "$l" | tail -1; }
    last=$(grep -E '^#[0-9]+' "$l" | tail -1 || true)
    cov=$(echo "$last" | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
    ft=$(echo "$last" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
    found=$(grep -oE '(crash|timeout|oom|leak|slow-unit)-[0-9a-f]+' "$l" | head -1 || true)
    ran=$(stat number_of_executed_units)
    if [ -n "$found" ] || [ -z "$ran" ]; then
        status=1
        found=${found:-"no final stats (see $l)"}
    fi
    printf '%-13s %12s %9s %8s %8s %7s %8s  %s\n' "$t" "${ran:-?}" \
        "$(stat average_exec_per_sec)" "${cov:-?}" "${ft:-?}" \
        "$(ls "$fuzz_dir/corpus/$t" | wc -l)" "$(stat peak_rss_mb)" "${found:-none}"
done
exit $status
