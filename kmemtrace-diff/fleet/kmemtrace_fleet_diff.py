#!/usr/bin/env python3
"""kmemtrace-fleet-diff: compare a fleet's captures with a baseline, as
`kmemtrace-diff --base BASE BOARD...` does, from their Parquet exports, in
one query on Spark (or DuckDB on one machine).

Each board's captures are exported where they are made
(`kmemtrace-export LOG --to parquet -o dataset/NAME --capture NAME`); the
export's `figures.parquet` holds the figures kmemtrace-diff compares, read
by the same code. This job groups the captures into the baseline and the
boards, takes each side's medians, spreads and rates per second, compares
every board with the baseline figure by figure, and checks the gates of a
kmemtrace-diff rules file on each: the numbers and verdicts that
`kmemtrace-diff --base B1 B2 --new X1 X2 --new Y1 ... --gate RULES` gives.

    kmemtrace-fleet-diff dataset/ --base 'base-*' --board '^(.*)-run[0-9]+$' \\
        --gate rules.toml [--engine spark|duckdb] [--out DIR] [--json]

Needs pyspark (and a Java runtime) for `--engine spark`, the default, or
the duckdb module for `--engine duckdb`. Exit status as kmemtrace-diff's:
0 every gate holds, 1 a gate failed, 2 a bad option or rules file, 3 no
usable input, 5 a capture that is not whole where gates are checked
(that board's gates are not judged).
"""

import argparse
import decimal
import fnmatch
import glob
import json
import os
import re
import sys

SCHEMA = "kmemtrace-fleet-diff/1"
PROG = "kmemtrace-fleet-diff"
# The package's version, written in when it is installed (scripts/deb.sh).
VERSION = "0.0.0-source"
FORMATS = (
    "reads: Parquet (kmemtrace-parquet/2: figures.parquet), gates (kmemtrace-diff's TOML)\n"
    f"writes: JSON ({SCHEMA}), Parquet (changes, verdicts)"
)

# kmemtrace-cli's exit codes (kmemtrace_cli::exit).
EXIT_OK, EXIT_NO, EXIT_USAGE, EXIT_INPUT, EXIT_OUTPUT, EXIT_DAMAGED = 0, 1, 2, 3, 4, 5
# `partial` of a whole capture without kmem events (`compare::Partial`).
NO_KMEM_EVENTS = "no kmem events"

# kmemtrace-diff's scopes, in its order (`figures::Scope`): the order
# changes of the same size are listed in.
SCOPES = ["total", "callsite", "cache", "page_callsite", "order", "stall_site"]
SCOPE_LETTER = dict(zip(SCOPES, "tckpos"))

# kmemtrace-diff's metric table (`figures::METRICS`): name, kind, scopes
# (as `kmemtrace-diff --help` writes them). The tests hold it to the help.
METRICS = [
    ("hits", "count", "tckpo"),
    ("req", "count", "tck"),
    ("bytes", "count", "tckp"),
    ("waste", "count", "tck"),
    ("frag_pct", "ratio", "tck"),
    ("frees", "count", "tck"),
    ("cross_cpu_frees", "count", "tck"),
    ("failed", "count", "tc"),
    ("live_objects", "level", "tck"),
    ("live_bytes", "level", "tckp"),
    ("peak_live_bytes", "level", "tck"),
    ("leaks", "level", "tc"),
    ("leak_bytes", "level", "tc"),
    ("live_blocks", "level", "tpo"),
    ("page_allocs", "count", "t"),
    ("page_bytes", "count", "t"),
    ("page_frees", "count", "t"),
    ("page_failures", "count", "t"),
    ("fallbacks", "count", "t"),
    ("fallbacks_fragmenting", "count", "t"),
    ("stalls", "count", "ts"),
    ("stall_ns", "count", "ts"),
    ("stall_p99_ns", "level", "s"),
    ("oom_kills", "count", "t"),
]
MISUSE = [
    "double_free",
    "kmalloc_freed_by_kmem_cache_free",
    "cache_mismatch",
    "bytes_alloc_below_bytes_req",
    "live_pointer_returned",
    "kmem_cache_alloc_freed_by_kfree",
    "failed_allocation",
    "free_of_object_allocated_before_capture",
]
PAGE_MISUSE = [
    "freed_twice",
    "allocated_while_live",
    "freed_with_larger_order",
    "freed_with_smaller_order",
    "freed_unseen",
]


def metric_names():
    return (
        [m[0] for m in METRICS]
        + [f"misuse:{k}" for k in MISUSE]
        + [f"page_misuse:{k}" for k in PAGE_MISUSE]
    )


def lookup(name):
    """(kind, scopes) of a metric, or None (`figures::lookup`)."""
    for n, kind, letters in METRICS:
        if n == name:
            return kind, [s for s in SCOPES if SCOPE_LETTER[s] in letters]
    family, _, kind = name.partition(":")
    if family == "misuse" and kind in MISUSE:
        return "count", ["total", "callsite"]
    if family == "page_misuse" and kind in PAGE_MISUSE:
        return "count", ["total"]
    return None


# ---------------------------------------------------------------- numbers


def whole(v):
    """`v` as an int where it is a whole number a double holds exactly."""
    if v is not None and v == v and abs(v) < 9.0e15 and float(v).is_integer():
        return int(v)
    return None


def fmt(v):
    """A figure in messages, as kmemtrace-diff writes it (`gate::fmt`)."""
    w = whole(v)
    return str(w) if w is not None else f"{v:.2f}"


def display(v):
    """A limit as Rust's `{}` writes a double: no exponent, no `.0`, `-0`."""
    if v == 0 and str(v).startswith("-"):
        return "-0"
    d = format(decimal.Decimal(repr(v)), "f")
    return d[:-2] if d.endswith(".0") else d


def median(values):
    """The median, the mean of the two middle values for an even count."""
    v = sorted(values)
    n = len(v)
    if n == 0:
        return None
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2.0


# ------------------------------------------------------------------ gates


class RulesError(Exception):
    pass


SELECTORS = ["callsite", "cache", "page_callsite", "order", "stall_site"]


def rule_lines(text):
    """Per `[[gate]]` table in order: its header's line and, per key, the
    line it is given on (1-based). tomllib says no lines: they are found
    by reading the file as it is usually written, one `key = value` a line;
    a rule written otherwise is placed at its header."""
    tables = []
    for i, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if re.match(r"\[\[\s*gate\s*\]\]", s):
            tables.append((i, {}))
        elif s.startswith("["):
            tables.append((i, None))
        elif tables and tables[-1][1] is not None:
            m = re.match(r"""["']?([A-Za-z0-9_-]+)["']?\s*=""", s)
            if m:
                tables[-1][1].setdefault(m.group(1), i)
    return [(h, keys) for h, keys in tables if keys is not None]


def parse_rules(file, text):
    """The rules of a kmemtrace-diff gates file, refused as kmemtrace-diff
    refuses them (`gate::parse`), with the same messages."""
    import tomllib

    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise RulesError(f"{file}: {e}")
    unknown = set(raw) - {"gate"}
    if unknown:
        raise RulesError(f"{file}: unknown field `{sorted(unknown)[0]}`, expected `gate`")
    rules = raw.get("gate", [])
    if not isinstance(rules, list) or not all(isinstance(r, dict) for r in rules):
        raise RulesError(f"{file}: `gate` is an array of tables ([[gate]])")
    if not rules:
        raise RulesError(f"{file}: no [[gate]] rule")
    lines = rule_lines(text)
    placed = [(r, lines[i] if i < len(lines) else (1, {})) for i, r in enumerate(rules)]
    # As serde reads the whole file before any rule is judged: fields and
    # their types first, in every rule, then each rule's meaning.
    for r, where in placed:
        check_fields(file, r, where)
    return [parse_rule(file, r, where) for r, where in placed]


def rule_error(file, where):
    """Raises a rule's error at the line of `key` (else its header)."""
    header, keys = where

    def err(key, why):
        raise RulesError(f"{file} line {keys.get(key, header)}: {why}")

    return err


# Each field's type, as the rules file's (`gate::RawGate`) are read.
FIELD_TYPES = {
    "name": (str,), "metric": (str,), "callsite": (str,), "cache": (str,),
    "page_callsite": (str,), "stall_site": (str,), "order": None,
    "max_increase_pct": (int, float), "max_increase": (int, float), "max": (int, float),
    "per_second": (bool,), "allow_no_match": (bool,),
}


def check_fields(file, r, where):
    err = rule_error(file, where)
    for k, v in r.items():
        if k not in FIELD_TYPES:
            err(k, f"unknown field `{k}`")
        want = FIELD_TYPES[k]
        numeric = want == (int, float)
        if want and (not isinstance(v, want) or (numeric and isinstance(v, bool))):
            what = {(str,): "a string", (bool,): "true or false"}.get(want, "a number")
            err(k, f"invalid type for `{k}`: expected {what}")
    if "metric" not in r:
        err("metric", "missing field `metric`")


def parse_rule(file, r, where):
    header, keys = where
    err = rule_error(file, where)
    metric = r["metric"]
    found = lookup(metric)
    if found is None:
        err("metric", f'metric "{metric}" is not known; metrics: {", ".join(metric_names())}')
    kind, scopes = found
    picked = {}
    for key in SELECTORS:
        if key not in r:
            continue
        v = r[key]
        if key == "order":
            if isinstance(v, bool) or not isinstance(v, (str, int)) or (
                isinstance(v, int) and not 0 <= v <= 10
            ):
                err(
                    key,
                    "order is a number, 0 to 10 (10: the row of orders 10 and above, `10+`), "
                    "or a glob on those names",
                )
            v = v if isinstance(v, str) else ("10+" if v == 10 else str(v))
        picked[key] = v
    if "+0x" in picked.get("callsite", ""):
        err("callsite", "call sites compare by function: leave out the +0x offset")
    if len(picked) > 1:
        # The second in kmemtrace-diff's order of selectors.
        second = list(picked)[1]
        err(
            second,
            "a rule selects one of callsite, cache, page_callsite, order, stall_site "
            "(or none, for the totals)",
        )
    scope, pattern = "total", None
    if picked:
        key, pattern = next(iter(picked.items()))
        scope = key
        if not pattern.strip():
            err(key, f"an empty {scope} pattern")
    if scope not in scopes:
        err(
            "metric",
            f'metric "{metric}" has no figure per {scope}: it has {", ".join(scopes)}',
        )
    if r.get("per_second", False) and kind != "count":
        err("metric", f'metric "{metric}" is not a count over time: it has no rate per second')
    limits = {}
    for key in ("max_increase_pct", "max_increase", "max"):
        if key in r:
            v = float(r[key])
            if v != v or v in (float("inf"), float("-inf")) or v < 0:
                err(key, "a limit is a number, 0 or more")
            limits[key] = v
    if not limits:
        err("metric", "the rule has no limit: give max_increase_pct, max_increase or max")
    gate = {
        "name": r.get("name", "") or "",
        "line": keys.get("metric", header),
        "metric": metric,
        "scope": scope,
        "pattern": pattern,
        "max_increase_pct": limits.get("max_increase_pct"),
        "max_increase": limits.get("max_increase"),
        "max": limits.get("max"),
        "per_second": r.get("per_second", False),
        "allow_no_match": r.get("allow_no_match", False),
    }
    if not gate["name"]:
        gate["name"] = describe(gate)
    return gate


def describe(g):
    """`hits of callsite alloc_pipe_info*: increase <= 20%`."""
    s = g["metric"] + (" per second" if g["per_second"] else "")
    if g["pattern"] is not None:
        s += f" of {g['scope']} {g['pattern']}"
    limits = []
    if g["max_increase_pct"] is not None:
        limits.append(f"increase <= {display(g['max_increase_pct'])}%")
    if g["max_increase"] is not None:
        limits.append(f"increase <= {display(g['max_increase'])}")
    if g["max"] is not None:
        limits.append(f"<= {display(g['max'])}")
    return f"{s}: {', '.join(limits)}"


def glob_match(pattern, name):
    """The shell's `*` and `?`, nothing else (`gate::glob`)."""
    rx = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(rx, name, re.S) is not None


def judge(gate, rows):
    """A gate's verdict on one board from its comparison rows of the gate's
    scope and metric (`gate::check`)."""
    if gate["pattern"] is None:
        names = ["total"]
    else:
        names = sorted(
            {r["name"] for r in rows if glob_match(gate["pattern"], r["name"])},
            key=lambda n: n.encode(),
        )
    by_name = {r["name"]: r for r in rows}
    checked = [judge_row(gate, by_name.get(n, {}), n) for n in names]
    passed = (bool(checked) or gate["allow_no_match"]) and all(
        not c["breaches"] for c in checked
    )
    return {"gate": gate, "passed": passed, "checked": checked}


def judge_row(gate, r, name):
    if gate["per_second"]:
        b, n = r.get("base_rate"), r.get("new_rate")
        lo, hi = r.get("base_rate_lo"), r.get("base_rate_hi")
    else:
        b, n = r.get("base"), r.get("new")
        lo, hi = r.get("base_lo"), r.get("base_hi")
    spread = None if lo is None else [lo, hi]
    nv = n if n is not None else 0.0
    delta = nv - (b if b is not None else 0.0)
    # With several baseline captures, an increase within their own spread
    # is noise: it breaks an increase limit only above the highest.
    above_noise = spread is None or nv > spread[1]
    breaches = []
    if gate["max"] is not None and nv > gate["max"]:
        breaches.append(f"{fmt(nv)} > max {fmt(gate['max'])}")
    lim = gate["max_increase"]
    if lim is not None and delta > lim and above_noise:
        breaches.append(f"increase {fmt(delta)} > {fmt(lim)}")
    lim = gate["max_increase_pct"]
    if lim is not None:
        if b is not None and b > 0:
            if above_noise and 100.0 * delta / b > lim:
                breaches.append(f"increase {100.0 * delta / b:.1f}% > {fmt(lim)}%")
        elif nv > 0 and above_noise:
            start = "0" if b is not None else "none"
            breaches.append(f"from {start} to {fmt(nv)} (limit {fmt(lim)}%)")
    return {"name": name, "base": b, "new": n, "base_spread": spread, "breaches": breaches}


# ---------------------------------------------------------------- engines


class Spark:
    """Spark SQL: local mode or a cluster (`--master`)."""

    name = "spark"

    def __init__(self, master):
        from pyspark.sql import SparkSession

        b = SparkSession.builder.appName("kmemtrace-fleet-diff")
        if master:
            b = b.master(master)
        self.spark = (
            b.config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", os.environ.get("KMT_SHUFFLE", "8"))
            .getOrCreate()
        )
        self.spark.sparkContext.setLogLevel("ERROR")

    def read(self, paths):
        self.spark.read.parquet(*paths).createOrReplaceTempView("figures")

    def rows_table(self, name, columns, rows):
        from pyspark.sql.types import StringType, StructField, StructType

        schema = StructType([StructField(c, StringType(), True) for c in columns])
        self.spark.createDataFrame(rows, schema).createOrReplaceTempView(name)

    def table(self, name, sql):
        df = self.spark.sql(sql).cache()
        df.createOrReplaceTempView(name)

    def rows(self, sql):
        return [r.asDict() for r in self.spark.sql(sql).collect()]

    def write(self, sql, path):
        self.spark.sql(sql).write.mode("overwrite").parquet(path)


class DuckDB:
    """DuckDB, in this process: one machine."""

    name = "duckdb"

    def __init__(self):
        import duckdb

        self.con = duckdb.connect()

    def read(self, paths):
        listed = ", ".join("'" + p.replace("'", "''") + "'" for p in paths)
        self.con.execute(f"create view figures as select * from read_parquet([{listed}])")

    def rows_table(self, name, columns, rows):
        # Through a file: inserting row by row is slow at a fleet's size.
        import tempfile

        cols = ", ".join(f"'{c}': 'VARCHAR'" for c in columns)
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(dict(zip(columns, r))) + "\n")
            f.flush()
            q = f.name.replace("'", "''")
            self.con.execute(
                f"create temp table {name} as select * from read_json('{q}', "
                f"format = 'newline_delimited', columns = {{{cols}}})"
            )

    def table(self, name, sql):
        self.con.execute(f"create temp table {name} as {sql}")

    def rows(self, sql):
        cur = self.con.execute(sql)
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r)) for r in cur.fetchall()]

    def write(self, sql, path):
        q = path.replace("'", "''")
        self.con.execute(f"copy ({sql}) to '{q}' (format parquet)")


# The comparison, in SQL both engines run. A side's value of a figure is
# the median over its captures; a capture without the row counts 0, but
# for ratios, which have no value there (`compare::Group::values`).
# Medians are the middle row's value, or the mean of the two middle rows'
# (computed as kmemtrace-diff computes them, so the numbers are equal).
STATS = """
with keys as (
  select distinct s.side, s.role, f.scope, f.name, f.metric, f.kind
  from figures f join sides s on f.capture = s.capture
), caps as (
  select distinct s.side, s.capture, f.seconds
  from figures f join sides s on f.capture = s.capture
), vals as (
  select k.side, k.role, k.scope, k.name, k.metric, k.kind,
    case when f.value is not null then f.value
         when k.kind = 'ratio' then null else 0e0 end as v,
    coalesce(f.value, 0e0) / greatest(c.seconds, 1e-6) as rate
  from keys k join caps c on c.side = k.side
  left join figures f on f.capture = c.capture and f.scope = k.scope
    and f.name = k.name and f.metric = k.metric
), ranked as (
  select *,
    row_number() over (partition by side, scope, name, metric order by v asc nulls last) as rv,
    count(v) over (partition by side, scope, name, metric) as nv,
    row_number() over (partition by side, scope, name, metric order by rate asc) as rr,
    count(*) over (partition by side, scope, name, metric) as nr
  from vals
)
select side, role, scope, name, metric, kind,
  avg(case when rv = floor((nv + 1) / 2) or rv = floor(nv / 2) + 1 then v end) as med,
  case when max(nv) >= 2 then min(v) end as lo,
  case when max(nv) >= 2 then max(v) end as hi,
  avg(case when rr = floor((nr + 1) / 2) or rr = floor(nr / 2) + 1 then rate end) as rate_med,
  case when max(nr) >= 2 then min(rate) end as rate_lo,
  case when max(nr) >= 2 then max(rate) end as rate_hi
from ranked group by side, role, scope, name, metric, kind
"""

# Every figure of the baseline or a board, per board: both sides' values.
COMPARISON = """
select coalesce(n.side, b.board) as side,
  coalesce(n.scope, b.scope) as scope, coalesce(n.name, b.name) as name,
  coalesce(n.metric, b.metric) as metric, coalesce(n.kind, b.kind) as kind,
  b.med as base, n.med as new, b.lo as base_lo, b.hi as base_hi,
  n.lo as new_lo, n.hi as new_hi,
  b.rate_med as base_rate, n.rate_med as new_rate,
  b.rate_lo as base_rate_lo, b.rate_hi as base_rate_hi
from (select st.*, bd.side as board from stats st cross join boards bd
      where st.role = 'base') b
full outer join (select * from stats where role = 'new') n
  on n.side = b.board and n.scope = b.scope and n.name = b.name and n.metric = b.metric
"""

# The figures that changed (`compare::compare`), with kmemtrace-diff's
# columns.
CHANGES = """
select side as board, scope, name, metric, base, new,
  coalesce(new, 0e0) - coalesce(base, 0e0) as delta,
  case when base is not null and base <> 0 and new is not null
       then 1e2 * (coalesce(new, 0e0) - coalesce(base, 0e0)) / base end as pct,
  case when kind = 'count' then base_rate end as base_per_s,
  case when kind = 'count' then new_rate end as new_per_s,
  base_lo, base_hi, new_lo, new_hi,
  case when base_lo is not null
       then coalesce(new, 0e0) < base_lo or coalesce(new, 0e0) > base_hi end as outside_noise
from comparison
where coalesce(new, 0e0) - coalesce(base, 0e0) <> 0
"""


# ------------------------------------------------------------------- main


def dataset_paths(args):
    """Each DATASET argument as Parquet files: an export's directory, a
    directory of them, a glob of either or of figures.parquet files, or a
    remote path (`s3a://`, `hdfs://`) given to the engine as it is. An
    export without figures.parquet (made before there was one) stops the
    run: its board would be left out without a word."""
    out = []
    for a in args:
        if "://" in a:
            out.append(a)
            continue
        matches = sorted(glob.glob(a)) if any(c in a for c in "*?[") else [a]
        if not matches or not all(os.path.exists(m) for m in matches):
            raise Stop(EXIT_INPUT, f"{a}: no such file or directory")
        for m in matches:
            if not os.path.isdir(m):
                out.append(m)
            elif os.path.exists(os.path.join(m, "manifest.json")):
                out.append(export_figures(m))
            else:
                subs = sorted(d for d in glob.glob(os.path.join(m, "*"))
                              if os.path.exists(os.path.join(d, "manifest.json")))
                out.extend(export_figures(d) for d in subs)
    if not out:
        raise Stop(EXIT_INPUT, "no export in " + ", ".join(args))
    return out


def export_figures(d):
    f = os.path.join(d, "figures.parquet")
    if not os.path.exists(f):
        raise Stop(EXIT_INPUT, f"{d}: an export without figures.parquet (a kmemtrace-export "
                               "from before 2026-11-28): export the log again")
    return f


def sides_of(captures, base_patterns, board_rx):
    """(capture, side, role) rows: the baseline's captures by name or glob,
    every other capture on the board its name gives (`--board`'s first
    group; its own name where it does not match)."""
    rows = []
    for c in captures:
        if any(fnmatch.fnmatchcase(c, p) for p in base_patterns):
            rows.append((c, "", "base"))
            continue
        board = c
        if board_rx:
            m = board_rx.search(c)
            if m and m.groups() and m.group(1):
                board = m.group(1)
        rows.append((c, board, "new"))
    return rows


def side_info(caps):
    return {
        "captures": [
            {"name": c["capture"], "seconds": c["seconds"], "kernel": c["kernel"]} for c in caps
        ],
        "seconds": median([c["seconds"] for c in caps]) or 0.0,
    }


def appeared_vanished(rows, scope):
    names = [r for r in rows if r["scope"] == scope]
    new = sorted((r["name"] for r in names if r["base"] is None), key=str.encode)
    gone = sorted((r["name"] for r in names if r["new"] is None), key=str.encode)
    return new, gone


def number(v):
    w = whole(v) if isinstance(v, float) else None
    return w if w is not None else v


# The fields kmemtrace-diff writes whole numbers of as JSON integers
# (`compare::number`); the rest (percentages, rates, seconds) as floats.
WHOLE_AS_INTEGER = {
    "base", "new", "delta", "base_spread", "new_spread",
    "max_increase_pct", "max_increase", "max",
}


def jsonable(v, key=None):
    """The document as kmemtrace-diff writes its numbers."""
    if isinstance(v, dict):
        return {k: jsonable(x, k) for k, x in v.items()}
    if isinstance(v, list):
        return [jsonable(x, key) for x in v]
    return number(v) if key in WHOLE_AS_INTEGER else v


# The order changes are listed in (`compare::sort`'s default): the largest
# first, then scope, name and metric (names byte by byte, as Rust orders
# strings and both engines compare them).
SCOPE_RANK = "case scope " + " ".join(f"when '{s}' then {i}" for i, s in enumerate(SCOPES)) + " end"
ORDER = f"abs(delta) desc, {SCOPE_RANK}, name, metric"


def sql_text(s):
    """A string literal both engines read the same: a backslash, which
    Spark's parser would take for an escape, as `chr(92)`."""
    parts = ["'" + p.replace("'", "''") + "'" for p in s.split("\\")]
    return parts[0] if len(parts) == 1 else "concat(" + ", chr(92), ".join(parts) + ")"


def like(pattern):
    """A gate's glob as a LIKE pattern with `!` as the escape: the rows a
    gate looks at are found by the engines, not on the driver."""
    out = []
    for c in pattern:
        if c in "!%_":
            out.append("!" + c)
        else:
            out.append({"*": "%", "?": "_"}.get(c, c))
    return "".join(out)


def listed_changes(engine, lines):
    """Each board's changes in order: all of them (`lines` None), else the
    first `lines` outside the baseline's noise (what the text shows)."""
    if lines is None:
        q = f"select * from changes order by board, {ORDER}"
    else:
        q = (
            f"select * from (select *, row_number() over (partition by board order by {ORDER}) "
            "as k from changes where coalesce(outside_noise, true)) ranked "
            f"where k <= {int(lines)} order by board, k"
        )
    out = {}
    for r in engine.rows(q):
        r.pop("k", None)
        for side in ("base", "new"):
            lo, hi = r.pop(f"{side}_lo"), r.pop(f"{side}_hi")
            r[f"{side}_spread"] = None if lo is None else [lo, hi]
        out.setdefault(r.pop("board"), []).append(r)
    return out


def check_dataset(engine, base_patterns, board_rx):
    """The captures, each once, and their sides."""
    caps = engine.rows(
        "select distinct capture, seconds, kernel, partial from figures order by capture"
    )
    if not caps:
        raise InputError("no figures: the dataset holds no figures.parquet rows")
    twice = engine.rows(
        "select capture from figures group by capture, scope, name, metric "
        "having count(*) > 1 limit 1"
    )
    if len({c["capture"] for c in caps}) != len(caps) or twice:
        name = twice[0]["capture"] if twice else "a capture"
        raise InputError(f"{name} is in the dataset twice: give each export once")
    sides = sides_of([c["capture"] for c in caps], base_patterns, board_rx)
    if not any(r[2] == "base" for r in sides):
        raise InputError(f"no capture is named {' or '.join(base_patterns)}: no baseline")
    return caps, sides


def compare(engine, base_patterns, board_rx, gates, lines):
    """The comparison document; `lines`: changes listed per board (None:
    all)."""
    caps, sides = check_dataset(engine, base_patterns, board_rx)
    boards = sorted({s for _, s, role in sides if role == "new"}, key=str.encode)
    if not boards:
        raise InputError("every capture is in the baseline: no board to compare")
    engine.rows_table("sides", ["capture", "side", "role"], sides)
    engine.rows_table("boards", ["side"], [(b,) for b in boards])
    engine.table("stats", STATS)
    engine.table("comparison", COMPARISON)
    engine.table("changes", CHANGES)
    by_capture = {c["capture"]: c for c in caps}
    side_caps = {}
    for c, s, role in sides:
        side_caps.setdefault((role, s), []).append(by_capture[c])
    counts = {
        r["board"]: r
        for r in engine.rows(
            "select board, count(*) as changes, "
            "count(case when not coalesce(outside_noise, true) then 1 end) as within_noise "
            "from changes group by board"
        )
    }
    changed = listed_changes(engine, lines)
    hits = {}
    for r in engine.rows(
        "select side, scope, name, base, new from comparison where metric = 'hits' "
        "and scope in ('callsite', 'page_callsite') and (base is null or new is null)"
    ):
        hits.setdefault(r["side"], []).append(r)
    gate_rows = {}
    for i, g in enumerate(gates):
        q = "select * from comparison where scope = {} and metric = {}".format(
            sql_text(g["scope"]), sql_text(g["metric"])
        )
        if g["pattern"] is not None:
            q += f" and name like {sql_text(like(g['pattern']))} escape '!'"
        for r in engine.rows(q):
            gate_rows.setdefault((i, r["side"]), []).append(r)
    base_caps = side_caps[("base", "")]
    comparisons = []
    for b in boards:
        mine = side_caps[("new", b)]
        hit_rows = hits.get(b, [])
        new_cs, gone_cs = appeared_vanished(hit_rows, "callsite")
        new_ps, gone_ps = appeared_vanished(hit_rows, "page_callsite")
        partial = [f"{c['capture']}: {c['partial']}" for c in base_caps + mine if c["partial"]]
        verdicts = [] if (partial and gates) else [
            judge(g, gate_rows.get((i, b), [])) for i, g in enumerate(gates)
        ]
        n = counts.get(b, {"changes": 0, "within_noise": 0})
        comparisons.append(
            {
                "board": b,
                "new": side_info(mine),
                "changes": changed.get(b, []),
                "changes_total": n["changes"],
                "within_noise": n["within_noise"],
                "new_callsites": new_cs,
                "vanished_callsites": gone_cs,
                "new_page_callsites": new_ps,
                "vanished_page_callsites": gone_ps,
                "gates": verdicts,
                "gates_failed": sum(1 for v in verdicts if not v["passed"]),
                "not_whole": partial,
            }
        )
    return {
        "schema": SCHEMA,
        "engine": engine.name,
        "base": side_info(base_caps),
        "sort": ["change"],
        "comparisons": comparisons,
        "gates_failed": sum(c["gates_failed"] for c in comparisons),
    }


class InputError(Exception):
    pass


def text(doc):
    """Per board: its captures, the largest changes outside the baseline's
    noise, and the gates."""
    out = [f"baseline: {', '.join(c['name'] for c in doc['base']['captures'])}"]
    for c in doc["comparisons"]:
        shown = c["changes"]
        flagged = c["changes_total"] - c["within_noise"]
        names = ", ".join(x["name"] for x in c["new"]["captures"])
        out.append(
            f"\n== board {c['board']} ({names}): {flagged} changes"
            + (f" ({c['within_noise']} more inside the baseline's spread)" if c["within_noise"] else "")
        )
        for w in c["not_whole"]:
            out.append(f"not whole, no gate judged: {w}")
        head = f"{'scope':<13} {'name':<40} {'metric':<18} {'base':>14} {'new':>14} {'change%':>8}"
        if shown:
            out.append(head)
        for ch in shown:
            pct = (
                f"{ch['pct']:+.1f}%" if ch["pct"] is not None
                else "new" if ch["base"] is None else "gone" if ch["new"] is None else "-"
            )
            base = "-" if ch["base"] is None else fmt(ch["base"])
            new = "-" if ch["new"] is None else fmt(ch["new"])
            out.append(
                f"{ch['scope']:<13} {ch['name'][:40]:<40} {ch['metric']:<18} {base:>14} {new:>14} {pct:>8}"
            )
        if flagged > len(shown):
            out.append(f"... {flagged - len(shown)} more changes (-l)")
        if c["gates"]:
            out.append(f"Gates: {c['gates_failed']} of {len(c['gates'])} failed")
            for v in c["gates"]:
                word = "PASS" if v["passed"] else "FAIL"
                out.append(f"  {word}  {v['gate']['name']}")
                for r in v["checked"]:
                    for why in r["breaches"]:
                        out.append(f"        {r['name']}: {why}")
                if not v["checked"] and not v["passed"]:
                    out.append("        no row matches (allow_no_match = true passes)")
    failed = [c["board"] for c in doc["comparisons"] if c["gates_failed"]]
    out.append(f"\n{len(doc['comparisons'])} boards, {doc['gates_failed']} gate failures")
    if failed:
        more = f" and {len(failed) - 20} more" if len(failed) > 20 else ""
        out.append(f"boards that failed a gate ({len(failed)}): {', '.join(failed[:20])}{more}")
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------ JUnit
# As kmemtrace-diff's (`junit.rs`): one test suite per board, one test case
# per gate, a failure with the figures of each row that breaks it; a board
# whose captures are not whole has one test case in error.


def xml(s, attribute=False):
    """`s` escaped for XML (`kmemtrace_cli::markup::escape`)."""
    out = []
    for c in s:
        if c in "&<>\"'":
            out.append({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&apos;"}[c])
        elif c in "\n\t":
            out.append(("&#10;" if c == "\n" else "&#9;") if attribute else c)
        elif c == "\r":
            out.append("&#13;")
        elif ord(c) < 0x20 or c in "\ufffe\uffff":
            out.append("\ufffd")
        else:
            out.append(c)
    return "".join(out)


def class_name(board):
    clean = "".join(c if c.isalnum() or c == "-" else "_" for c in board.rsplit("/", 1)[-1])
    return f"{PROG}.{clean}"


def row_text(r):
    """`name: base -> new (baseline spread lo..hi): why`."""
    v = lambda x: "none" if x is None else fmt(x)  # noqa: E731
    spread = "" if r["base_spread"] is None else " (baseline spread {}..{})".format(
        fmt(r["base_spread"][0]), fmt(r["base_spread"][1]))
    why = "; ".join(r["breaches"]) or "within limits"
    return f"{r['name']}: {v(r['base'])} -> {v(r['new'])}{spread}: {why}"


def junit_case(board, v):
    g = v["gate"]
    o = [f'    <testcase name="{xml(g["name"], True)}" classname="{xml(class_name(board), True)}" time="0">']
    failures = [r for r in v["checked"] if r["breaches"]]
    if failures:
        more = "" if len(failures) == 1 else f" (and {len(failures) - 1} more)"
        o.append('      <failure type="gate" message="{}">{}</failure>'.format(
            xml(row_text(failures[0]) + more, True), xml("\n".join(map(row_text, failures)))))
    elif not v["checked"]:
        why = "matched no row in either capture"
        if v["passed"]:
            o.append(f'      <skipped message="{why}"/>')
        else:
            o.append(f'      <failure type="gate" message="{why}">{why}: call sites are named by '
                     "function (no +0x offset), caches and size classes by name, orders 0..9 and "
                     "10+ (allow_no_match = true lets it pass)</failure>")
    seen = "\n".join(map(row_text, v["checked"])) or "no row matched in either capture"
    o.append(f"      <system-out>rules line {g['line']}: {xml(describe(g))}\n{xml(seen)}</system-out>")
    o.append("    </testcase>")
    return o


def junit(doc):
    """The whole fleet as one JUnit document."""
    tests = sum(max(len(c["gates"]), 1 if c["not_whole"] else 0) for c in doc["comparisons"])
    errors = sum(1 for c in doc["comparisons"] if c["not_whole"] and not c["gates"])
    o = ['<?xml version="1.0" encoding="UTF-8"?>',
         f'<testsuites name="{PROG}" tests="{tests}" failures="{doc["gates_failed"]}" '
         f'errors="{errors}" time="0">']
    base = " + ".join(c["name"] for c in doc["base"]["captures"])
    for c in doc["comparisons"]:
        board = c["board"]
        failed = sum(1 for v in c["gates"] if not v["passed"])
        skipped = sum(1 for v in c["gates"] if v["passed"] and not v["checked"])
        broken = 1 if c["not_whole"] and not c["gates"] else 0
        o.append(f'  <testsuite name="{xml(board, True)}" tests="{max(len(c["gates"]), broken)}" '
                 f'failures="{failed}" errors="{broken}" skipped="{skipped}" time="0">')
        o.append("    <properties>")
        for k, val in [
            ("base", base),
            ("new", " + ".join(x["name"] for x in c["new"]["captures"])),
            ("base_seconds", f"{doc['base']['seconds']:.3f}"),
            ("new_seconds", f"{c['new']['seconds']:.3f}"),
        ]:
            o.append(f'      <property name="{k}" value="{xml(val, True)}"/>')
        o.append("    </properties>")
        for v in c["gates"]:
            o += junit_case(board, v)
        if broken:
            why = "; ".join(c["not_whole"]) + ": no gate stands on a capture that is not whole"
            o.append(f'    <testcase name="the gates" classname="{xml(class_name(board), True)}" time="0">')
            o.append(f'      <error type="{PROG}" message="{xml(why, True)}">{xml(why)}</error>')
            o.append("    </testcase>")
        o.append("  </testsuite>")
    o.append("</testsuites>")
    return "\n".join(o) + "\n"


def junit_error(message):
    """A report for CI when nothing could be compared (bad rules, a dataset
    that cannot be read): one test case in error (`junit::error`)."""
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<testsuites name="{PROG}" tests="1" failures="0" errors="1" time="0">\n'
        f'  <testsuite name="{PROG}" tests="1" failures="0" errors="1" skipped="0" time="0">\n'
        f'    <testcase name="compare the fleet" classname="{PROG}.run" time="0">\n'
        f'      <error type="{PROG}" message="{xml(message, True)}">{xml(message)}</error>\n'
        "    </testcase>\n"
        "  </testsuite>\n"
        "</testsuites>\n"
    )


def write_outputs(engine, out_dir, doc):
    """`changes.parquet` (every changed figure per board) and
    `verdicts.parquet` (every gate's rows per board)."""
    os.makedirs(out_dir, exist_ok=True)
    engine.write("select * from changes", os.path.join(out_dir, "changes.parquet"))
    rows = []
    for c in doc["comparisons"]:
        for v in c["gates"]:
            for r in v["checked"] or [{"name": None, "base": None, "new": None, "breaches": []}]:
                rows.append(
                    (
                        c["board"], v["gate"]["name"], str(v["gate"]["line"]),
                        "true" if v["passed"] else "false", r["name"],
                        None if r["base"] is None else repr(r["base"]),
                        None if r["new"] is None else repr(r["new"]),
                        "; ".join(r["breaches"]) or None,
                    )
                )
    cols = ["board", "gate", "line", "passed", "name", "base", "new", "breaches"]
    engine.rows_table("verdicts", cols, rows)
    engine.write(
        "select board, gate, cast(line as int) as line, passed = 'true' as passed, name, "
        "cast(base as double) as base, cast(new as double) as new, breaches from verdicts",
        os.path.join(out_dir, "verdicts.parquet"),
    )


def parser():
    p = argparse.ArgumentParser(
        prog=PROG,
        description=" ".join(__doc__.split("\n\n")[0].split(": ", 1)[1].split()),
    )
    p.add_argument("dataset", nargs="*", help="exports: directories, globs of figures.parquet")
    p.add_argument("--base", nargs="+", default=[], metavar="CAPTURE",
                   help="the baseline's captures (names or globs); several: their spread is the noise")
    p.add_argument("--board", metavar="REGEX",
                   help="a board's captures are those whose names give the same first group "
                        "(default: each capture is a board)")
    p.add_argument("--gate", metavar="RULES", help="kmemtrace-diff's gates file (TOML)")
    p.add_argument("--engine", choices=["spark", "duckdb"], default="spark",
                   help="Spark (pyspark, a Java runtime), or DuckDB on this machine")
    p.add_argument("--master", help="Spark's master URL (default: Spark's own, local[*])")
    p.add_argument("--out", metavar="DIR", help="write changes.parquet and verdicts.parquet there")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.add_argument("--junit", metavar="FILE",
                   help="write the gates' results as JUnit XML (a test suite per board)")
    p.add_argument("-l", "--lines", type=int, default=25, help="changes per board in the text (0: all)")
    p.add_argument("--metrics", action="store_true", help="list the metrics gates may name")
    p.add_argument("-V", "--version", action="store_true",
                   help="print the version and the formats read and written")
    p.add_argument("--generate-man", action="store_true", help="print the man page (roff)")
    p.add_argument("--generate-completions", choices=["bash", "zsh", "fish"], metavar="SHELL",
                   help="print the completions for bash, zsh or fish")
    return p


def roff(text):
    """Text as roff reads it: backslashes and dashes escaped, no line
    taken for a request."""
    out = []
    for line in text.replace("\\", "\\e").replace("-", "\\-").split("\n"):
        out.append("\\&" + line if line.startswith((".", "'")) else line)
    return "\n".join(out)


def man_page(p):
    """The man page, from the same definitions `--help` prints."""
    head, _, rest = __doc__.partition("\n\n")
    lines = [
        f'.TH {PROG} 1 "" "kmemtrace {VERSION}" "User Commands"',
        ".SH NAME",
        f"{PROG} \\- {roff(' '.join(head.split(': ', 1)[-1].split()))}",
        ".SH SYNOPSIS",
        roff(" ".join(p.format_usage().replace("usage: ", "").split())),
        ".SH DESCRIPTION",
    ]
    # Paragraphs filled; the indented example as it is.
    for para in rest.strip().split("\n\n"):
        if para.startswith("    "):
            lines += [".PP", ".nf", roff(para), ".fi"]
        else:
            lines += [".PP", roff(para)]
    lines.append(".SH OPTIONS")
    for a in p._actions:
        name = ", ".join(a.option_strings) or (a.metavar or a.dest).upper()
        if a.option_strings and a.nargs != 0:
            name += " " + (a.metavar or a.dest.upper())
        lines += [".TP", f"\\fB{roff(name)}\\fR", roff(a.help or "")]
    return "\n".join(lines) + "\n"


def completions(p, shell):
    """Completions from the parser's options; the datasets are files."""
    opts = [(o, a.help or "") for a in p._actions for o in a.option_strings]
    longs = [(o[2:], h) for o, h in opts if o.startswith("--")]
    if shell == "bash":
        words = " ".join(o for o, _ in opts)
        return f'complete -o default -W "{words}" {PROG}\n'
    if shell == "zsh":
        specs = " \\\n  ".join(
            "'--{}[{}]'".format(o, h.replace("'", "").replace("[", "(").replace("]", ")"))
            for o, h in longs
        )
        return f"#compdef {PROG}\n_arguments \\\n  {specs} \\\n  '*:dataset:_files'\n"
    return "".join(
        "complete -c {} -l {} -d '{}'\n".format(PROG, o, h.replace("'", ""))
        for o, h in longs
    )


class Stop(Exception):
    """A run that stops: its exit code and why."""

    def __init__(self, code, why):
        super().__init__(why)
        self.code = code


def main(argv):
    p = parser()
    a = p.parse_args(argv)
    if a.version:
        # Printed as it is: argparse's own version action refills the lines.
        print(f"{PROG} {VERSION}\n{FORMATS}")
        return EXIT_OK
    if a.generate_man:
        sys.stdout.write(man_page(p))
        return EXIT_OK
    if a.generate_completions:
        sys.stdout.write(completions(p, a.generate_completions))
        return EXIT_OK
    if a.metrics:
        for name, kind, letters in METRICS:
            print(f"  {name:<22} {letters:<5} {kind}")
        for k in MISUSE:
            print(f"  misuse:{k:<15} tc    count")
        for k in PAGE_MISUSE:
            print(f"  page_misuse:{k:<10} t     count")
        return EXIT_OK
    try:
        return run(a)
    except Stop as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        if a.junit:
            # A report for CI in error, as kmemtrace-diff leaves one.
            try:
                with open(a.junit, "w", encoding="utf-8") as f:
                    f.write(junit_error(str(e)))
            except OSError as w:
                print(f"{PROG}: {a.junit}: {w}", file=sys.stderr)
        return e.code


def run(a):
    """The comparison the options ask for; its exit status."""
    if not a.dataset or not a.base:
        raise Stop(EXIT_USAGE, "give DATASET... and --base CAPTURE...")
    if a.lines < 0:
        raise Stop(EXIT_USAGE, "-l: a number of lines, 0 (all) or more")
    try:
        board_rx = re.compile(a.board) if a.board else None
    except re.error as e:
        raise Stop(EXIT_USAGE, f"--board: {e}")
    gates = []
    if a.gate:
        try:
            with open(a.gate, encoding="utf-8") as f:
                gates = parse_rules(a.gate, f.read())
        except (OSError, UnicodeDecodeError) as e:
            raise Stop(EXIT_USAGE, f"{a.gate}: {e}")
        except RulesError as e:
            raise Stop(EXIT_USAGE, str(e))
    if a.junit and not gates:
        raise Stop(EXIT_USAGE, "--junit writes the gates' results: give --gate RULES")
    paths = dataset_paths(a.dataset)
    engine = open_engine(a)
    try:
        engine.read(paths)
        # -l 0, as kmemtrace-diff's: every change.
        lines = None if a.json or a.lines == 0 else a.lines
        doc = compare(engine, a.base, board_rx, gates, lines)
    except InputError as e:
        raise Stop(EXIT_INPUT, str(e))
    except Exception as e:  # the engine's: a file it cannot read
        raise Stop(EXIT_INPUT, f"{engine.name} could not read the dataset: {e}")
    for path, write in [
        (a.out, lambda: write_outputs(engine, a.out, doc)),
        (a.junit, lambda: write_text(a.junit, junit(doc))),
    ]:
        if path:
            try:
                write()
            except Exception as e:
                raise Stop(EXIT_OUTPUT, f"{path}: {e}")
    sys.stdout.write(json.dumps(jsonable(doc), indent=2) + "\n" if a.json else text(doc))
    # As kmemtrace-diff: a capture not whole is said, and the status is
    # 3 (no kmem events) or 5 (cut short or damaged) whether or not gates
    # were given; with gates its boards' are not judged.
    code = EXIT_OK
    said = set()
    for c in doc["comparisons"]:
        for w in c["not_whole"]:
            if w not in said:
                print(f"{PROG}: warning: {w}: its figures are not the whole capture's",
                      file=sys.stderr)
                said.add(w)
            worse = EXIT_INPUT if w.endswith(": " + NO_KMEM_EVENTS) else EXIT_DAMAGED
            code = worst(code, worse)
    if doc["gates_failed"]:
        code = worst(code, EXIT_NO)
    return code


def open_engine(a):
    try:
        return Spark(a.master) if a.engine == "spark" else DuckDB()
    except ImportError as e:
        need = "pyspark and a Java runtime" if a.engine == "spark" else "the duckdb module"
        raise Stop(EXIT_INPUT, f"--engine {a.engine} needs {need} ({e})")


def write_text(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def worst(a, b):
    """Unusable input over damaged over "no" (`kmemtrace_cli::exit::worst`)."""
    rank = [EXIT_OK, EXIT_NO, EXIT_DAMAGED, EXIT_INPUT]
    return max(a, b, key=rank.index)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
