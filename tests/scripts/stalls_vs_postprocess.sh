#!/bin/bash
# Direct reclaim per process, side by side: the kernel's own
# trace-vmscan-postprocess.pl on the kernel's `trace` text, and
# `kmemtrace-report --json`'s stalls section on the kmemtraced log of the
# same run (tests/data/make-stall-capture.sh makes both). Says whether they
# agree; exits 1 where they do not.
#
#   tests/scripts/stalls_vs_postprocess.sh LOG TRACE_TXT_GZ
#   e.g. tests/scripts/stalls_vs_postprocess.sh tests/data/stalls-6.1-x86_64.kmt \
#            tests/data/stalls-6.1-x86_64.trace.txt.gz
#   environment: KMEMTRACE_REPORT: the report (default: kmemtrace-report in
#                PATH, else target/release/kmemtrace-report);
#                POSTPROCESS_PL: the patched perl script (default: made by
#                patch-trace-vmscan-postprocess.sh from kernel sources, see there);
#                TRACE_FORMAT_DIR: the traced kernel's events/ directory
#                (default: none, the patched script's defaults for 6.1's text).
#
# What each side counts:
#   perl: per task (comm-pid), mm_vmscan_direct_reclaim_begin events, and
#         the sum of end - begin in its "Reclaim latencies" line (its
#         per-process "Time Stalled" column is broken in 6.1's copy: the
#         printf has fewer conversions than arguments); totals from its
#         Summary; kswapd wakeups and re-wakeups.
#   kmemtrace: `kmemtrace-report --json`: stalls.kinds["direct reclaim"]
#         (phases, ns) for the totals, stalls.tasks[].waits per task;
#         kswapd's wakes from sleep and its wake events. The recorder's own
#         threads (filters.recorder_tasks) are left out of every figure of
#         the report: perl's rows for them are shown, not compared, and
#         left out of its totals.
set -euo pipefail

[ $# -eq 2 ] || { sed -n '8,10p' "$0" >&2; exit 2; }
log=$1 txt=$2
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
report=${KMEMTRACE_REPORT:-$(command -v kmemtrace-report || echo "$root/target/release/kmemtrace-report")}
[ -x "$report" ] || { echo "no kmemtrace-report (cargo build --release -p kmemtrace-report, or KMEMTRACE_REPORT=...)" >&2; exit 2; }
tmp=$(mktemp -d /tmp/kmt-vs.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
pl=${POSTPROCESS_PL:-}
if [ -z "$pl" ]; then
  pl=$tmp/trace-vmscan-postprocess.pl
  "$here/patch-trace-vmscan-postprocess.sh" >"$pl"
fi

"$report" "$log" --json >"$tmp/report.json"
zcat -f "$txt" | TRACE_FORMAT_DIR=${TRACE_FORMAT_DIR:-/nonexistent} perl "$pl" >"$tmp/perl.txt" 2>&1 ||
  { cat "$tmp/perl.txt" >&2; echo "trace-vmscan-postprocess.pl failed" >&2; exit 2; }
zcat -f "$txt" >"$tmp/trace.txt"

python3 - "$tmp/report.json" "$tmp/perl.txt" "$tmp/trace.txt" <<'PY'
import json, re, sys
from collections import defaultdict

doc = json.load(open(sys.argv[1]))
pl = open(sys.argv[2]).read().splitlines()
st = doc.get('stalls')
if not st:
    sys.exit("the log has no stall events (kmemtrace-report --json: no `stalls`)")

# --- the trace text: each pid's comm, and which comms compacted or were throttled
line_re = re.compile(r'^\s*(.+?)-(\d+)\s+\[\d+\]\s+\S+\s+[0-9.]+:\s+(\w+):')
comm_of, other_waits = {}, defaultdict(int)
for l in open(sys.argv[3]):
    m = line_re.match(l)
    if not m:
        continue
    comm, pid, ev = m.group(1), int(m.group(2)), m.group(3)
    if comm != '<...>':
        comm_of[pid] = comm
    if ev in ('mm_compaction_try_to_compact_pages', 'mm_vmscan_throttled'):
        other_waits[pid] += 1

# --- the perl script's output
def section(title_re):
    for i, l in enumerate(pl):
        if re.match(title_re, l):
            return i
    return None

def pid_of(key):
    m = re.search(r'-(\d+)$', key)
    return int(m.group(1)) if m else None

perl = defaultdict(lambda: {'n': 0, 'ms': 0.0})
i = section(r'^Reclaim latencies expressed as order-latency_in_ms')
lat = {}
if i is not None:
    for l in pl[i + 1:]:
        if not l.strip():
            break
        f = l.split()
        lat[f[0]] = sum(float(t.split('-', 1)[1]) for t in f[1:])
i = section(r'^Process\s+Direct')
if i is None:
    sys.exit('trace-vmscan-postprocess.pl printed no process table:\n' + '\n'.join(pl))
for l in pl[i + 2:]:
    if not l.strip():
        break
    f = l.split()
    p = pid_of(f[0])
    perl[p]['n'] += int(f[1])
    perl[p]['ms'] += lat.get(f[0], 0.0)
kswapd_pl = []
i = section(r'^Kswapd\s+Kswapd')
if i is not None:
    for l in pl[i + 2:]:
        if not l.strip():
            break
        f = l.split()
        kswapd_pl.append((f[0], int(f[1]), int(f[2])))
def summary(name):
    for l in pl:
        if l.startswith(name + ':'):
            return float(l.split(':', 1)[1].split()[0])
    return None
pl_total_n = summary('Direct reclaims')
pl_total_s = summary('Time stalled direct reclaim')
pl_kswapd_awake = summary('Time kswapd awake')
warnings = [l for l in pl if l.startswith('WARNING') and 'format string not found' not in l]

# --- kmemtrace-report's stalls: per task, its direct reclaim phases
kind = {k['kind']: k for k in st['kinds']}
dr = kind.get('direct reclaim', {'phases': 0, 'ns': 0})
kmt = {}
for t in st['tasks']:
    comm_of.setdefault(t['pid'], t.get('comm') or '?')
    w = {x['kind']: x for x in t['waits']}.get('direct reclaim')
    if w:
        kmt[t['pid']] = (w['phases'], w['ns'])

# Timestamps: the text and the log are two ring buffers, each event stamped
# in each, one after the other; under emulation a vCPU can stall between
# the two (1.4 ms once in stalls-6.1), so a phase's length may differ.
# Agree: within 20 us a phase or 1%; perl's timestamps are microseconds.
def close(ms_a, ms_b, phases):
    return abs(ms_a - ms_b) <= max(0.020 * max(phases, 1), 0.01 * max(ms_a, ms_b))

# The two buffers stamp an event one after the other: a vCPU stalled
# between the writes (under emulation) moves one phase's end by up to a
# few ms in one of them, so per task the time may be a few ms apart.
def close_task(ms_a, ms_b, phases):
    return close(ms_a, ms_b, phases) or abs(ms_a - ms_b) <= 2.0

recorder = set(doc['filters'].get('recorder_tasks') or [])
rows, bad = [], 0
for p in sorted(set(perl) | set(kmt), key=lambda p: -perl.get(p, {'ms': 0})['ms']):
    pn, pms = (perl[p]['n'], perl[p]['ms']) if p in perl else (0, 0.0)
    kn, kns = kmt.get(p, (0, 0))
    if p in recorder:
        verdict = "the recorder's own: left out of the report"
    else:
        ok = kn == pn and close_task(pms, kns / 1e6, pn)
        bad += not ok
        verdict = 'agree' if ok else 'DIFFER'
    rows.append([str(p), comm_of.get(p, '?'), pn, f'{pms:.3f}', kn, f'{kns / 1e6:.3f}', verdict])

hdr = ['pid', 'comm', 'pl rclm', 'pl ms', 'kmt rclm', 'kmt ms', 'verdict']
w = [max(len(str(r[i])) for r in rows + [hdr]) for i in range(len(hdr))]
fmt = lambda r: ' | '.join(str(v).rjust(w[i]) if i in (2, 3, 4, 5) else str(v).ljust(w[i])
                           for i, v in enumerate(r)).rstrip()
print('Direct reclaim per process. pl: trace-vmscan-postprocess.pl on the trace text (reclaims,')
print('their time); kmt: kmemtrace-report --json, stalls.tasks[].waits["direct reclaim"].')
print(fmt(hdr))
print('-+-'.join('-' * x for x in w))
for r in rows:
    print(fmt(r))

print()
k_ms = dr['ns'] / 1e6
pl_n = sum(v['n'] for p, v in perl.items() if p not in recorder)
pl_ms = sum(v['ms'] for p, v in perl.items() if p not in recorder)
ok_n, ok_t = pl_n == dr['phases'], close(pl_ms, k_ms, pl_n)
bad += (not ok_n) + (not ok_t)
print(f"direct reclaims:     perl {pl_n} (of its {int(pl_total_n or 0)}: the recorder's left out), "
      f"kmemtrace {dr['phases']} (stalls.kinds): {'agree' if ok_n else 'DIFFER'}")
print(f"direct reclaim time: perl {pl_ms:.3f} ms, kmemtrace {k_ms:.3f} ms: "
      f"{'agree' if ok_t else 'DIFFER'}, {abs(pl_ms - k_ms) * 1000:.0f} us apart over {pl_n} phases")
bg = {b['thread']: b for b in st['background']}
if 'kswapd' in bg or kswapd_pl:
    pw, prw = sum(x[1] for x in kswapd_pl), sum(x[2] for x in kswapd_pl)
    kb = bg.get('kswapd', {})
    kw, kev, ka = kb.get('wakes', 0), kb.get('wake_events', 0), kb.get('awake_ns', 0) / 1e9
    ok = pw == kw and pw + prw == kev
    bad += not ok
    print(f"kswapd wakes:        perl {pw} wakeups + {prw} re-wakeups, kmemtrace {kw} wakes of "
          f"{kev} wake events: " + ('agree' if ok else 'DIFFER'))
    if pl_kswapd_awake is not None:
        ok = abs(pl_kswapd_awake - ka) <= 0.006
        bad += not ok
        print(f"kswapd awake:        perl {pl_kswapd_awake:.2f} s, kmemtrace {ka:.3f} s: {'agree' if ok else 'DIFFER'}")
for l in warnings:
    print('perl: ' + l)
print()
print('verdict: ' + ('they agree' if not bad else f'{bad} disagreement(s)'))
sys.exit(1 if bad else 0)
PY
