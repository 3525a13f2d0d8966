#!/bin/bash
# Benchmark: a fleet compared with its baseline, by `kmemtrace-diff` over
# the logs and by the fleet job over their Parquet exports (DuckDB, and
# Spark in local mode), rounds in turn.
#
#   kmemtrace-diff/bench/fleet.sh [BOARDS] [RUNS] [ROUNDS]
#
# BOARDS boards (default 100) of RUNS captures each (default 3) and a
# baseline of RUNS, every capture a copy of one of the bundled real
# captures (tests/data), board by board in turn. The exports' figures are
# then scaled per capture by a factor of 0.9-1.1 (DuckDB), so that runs
# differ and medians and spreads mean something; kmemtrace-diff reads the
# logs, whose figures are the copies' own: its time is what counts there.
# Prints each tool's wall time per round, then medians and ranges; the
# exports' time is printed once (each board exports its own captures).
# Needs python3 with duckdb and pyspark (and a Java runtime).
set -euo pipefail

here=$(cd "$(dirname "$0")/../.." && pwd)
boards=${1:-100}
runs=${2:-3}
rounds=${3:-3}
(cd "$here" && cargo build --release -q -p kmemtrace-diff -p kmemtrace-export)
bin=${CARGO_TARGET_DIR:-$here/target}/release
job=$here/kmemtrace-diff/fleet/kmemtrace_fleet_diff.py
work=$(mktemp -d /tmp/kmt-fleet.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/logs" "$work/dataset" "$work/scaled"

kinds=(board-arm64 board-armhf boot-6.1-x86_64 sample-x86_64 stalls-6.1-x86_64)
captures=()
for r in $(seq 1 "$runs"); do captures+=("base-run$r:board-arm64"); done
for b in $(seq 1 "$boards"); do
  kind=${kinds[$((b % ${#kinds[@]}))]}
  for r in $(seq 1 "$runs"); do captures+=("board$b-run$r:$kind"); done
done
start=$(date +%s.%N)
for c in "${captures[@]}"; do
  name=${c%%:*}
  cp "$here/tests/data/${c#*:}.kmt" "$work/logs/$name.kmt"
  "$bin/kmemtrace-export" "$work/logs/$name.kmt" --to parquet -q --capture "$name" -o "$work/dataset/$name"
done
end=$(date +%s.%N)
echo "fleet: $boards boards x $runs runs + $runs baseline runs = ${#captures[@]} captures, $(nproc) cores"
echo "exports: $(echo "$end - $start" | bc) s in all ($(du -sh "$work/dataset" | cut -f1)); each board exports its own"

python3 - "$work/dataset" "$work/scaled" <<'EOF'
import duckdb, sys
src, dst = sys.argv[1], sys.argv[2]
duckdb.sql(f"""copy (select capture, seconds, kernel, partial, scope, name, metric, kind,
  case when kind = 'ratio' then value
       else round(value * (0.9 + 0.2 * (hash(capture) % 1000) / 1000.0)) end as value
  from read_parquet('{src}/*/figures.parquet')) to '{dst}/figures.parquet' (format parquet)""")
print("figures:", duckdb.sql(f"select count(*) from '{dst}/figures.parquet'").fetchall()[0][0], "rows")
EOF

base=()
news=()
for r in $(seq 1 "$runs"); do base+=("$work/logs/base-run$r.kmt"); done
for b in $(seq 1 "$boards"); do
  news+=(--new)
  for r in $(seq 1 "$runs"); do news+=("$work/logs/board$b-run$r.kmt"); done
done
printf '[[gate]]\nmetric = "hits"\nmax_increase_pct = 20\n' >"$work/gates.toml"

declare -A times
secs() { local s e; s=$(date +%s.%N); "$@" >/dev/null 2>&1 || true; e=$(date +%s.%N); echo "$e - $s" | bc; }
for round in $(seq 1 "$rounds"); do
  t1=$(secs "$bin/kmemtrace-diff" --base "${base[@]}" "${news[@]}" --gate "$work/gates.toml")
  t2=$(secs python3 "$job" "$work/scaled" --base 'base-*' --board '^(.*)-run[0-9]+$' \
    --gate "$work/gates.toml" --engine duckdb --out "$work/out-duckdb")
  t3=$(secs python3 "$job" "$work/scaled" --base 'base-*' --board '^(.*)-run[0-9]+$' \
    --gate "$work/gates.toml" --engine spark --master "local[$(nproc)]" --out "$work/out-spark")
  echo "round $round: kmemtrace-diff ${t1} s, fleet job on DuckDB ${t2} s, on Spark local[$(nproc)] ${t3} s"
  times[diff]+="$t1 "; times[duckdb]+="$t2 "; times[spark]+="$t3 "
done
for k in diff duckdb spark; do
  python3 -c "
import statistics, sys
v = [float(x) for x in sys.argv[2:]]
print(f'{sys.argv[1]:>8}: median {statistics.median(v):.2f} s, range {min(v):.2f}-{max(v):.2f} s')" "$k" ${times[$k]}
done
