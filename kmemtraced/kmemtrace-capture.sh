#!/bin/sh
# kmemtrace-capture.sh: record the kernel's kmem tracepoints on a machine that
# cannot run kmemtraced (read-only or signed root file system, busybox only),
# leaving one directory or tar file to copy off and turn into a kmemtrace log
# elsewhere with `kmemtraced --import DUMP -o FILE`.
#
# POSIX sh; needs only busybox applets (sh, cat, dd, mkdir, rmdir, rm, sed,
# sleep, kill, uname, date, tar for tar output; od, getconf optional).
#
# What it does: creates its own tracefs instance (kmt-capture-<pid>), sets the
# per-CPU buffer size, enables the kmem events the kernel has, and while
# recording copies each CPU's per_cpu/cpuN/trace_pipe_raw in whole
# sub-buffers (dd bs=<sub-buffer size>) to files. At the end it turns tracing
# off, drains what is left, saves what decoding elsewhere needs and removes the
# instance (also when interrupted or on error).
#
# Dump layout (like tracefs; `kmemtraced --import` reads it):
#   events/header_page  events/header_event  events/kmem/<event>/{format,id}
#   per_cpu/cpuN/trace_pipe_raw   every sub-buffer read, concatenated
#   per_cpu/cpuN/stats.start      the CPU's ring-buffer stats before tracing
#   per_cpu/cpuN/stats            ... after tracing stopped, before the drain
#   per_cpu/cpuN/stats.after_drain ... after the drain
#   kallsyms  saved_cmdlines(.start)  saved_tgids  printk_formats  modules
#   uname (uname -a)  uname_s uname_n uname_r uname_v uname_m
#   page_size_bytes  nproc  cpus_online  node_cpulist  trace_clock
#   buffer_size_kb  buffer_subbuf_size_kb  enabled_events  endianness
#   capture_info (key=value: tool, version, instance, times, stop reason, ...)
#   pagetypeinfo  min_free_kbytes  (/proc/pagetypeinfo, /proc/sys/vm/...)
#   page_stacks  present when the kernel took stacks with mm_page_alloc (a
#                line per stacked event and its trigger, whose filter says
#                how page allocations were sampled); events/ftrace/
#                kernel_stack/format then decodes them
#
# Exit status, as every kmemtrace program's (one line on stderr says what):
# 0 done; 2 usage (a bad option, a buffer size the kernel refuses, no such
# event); 3 tracefs unavailable or not permitted; 4 the dump could not be
# written; 6 recording failed while it ran. With `-- COMMAND`, the dump is
# written whatever the command's status, and the script exits with 0 (the
# status is in capture_info). 130/143: interrupted twice (the second
# INT/TERM aborts the drain).

KMT_VERSION=1
PROG=kmemtrace-capture
# The dump holds kallsyms and raw kernel pointers (the kernel's layout):
# readable by its owner only, as kmemtraced's logs.
umask 077

# Allocation stalls, recorded with the default events where the kernel has
# them (kmemtraced's list, kmemtrace_kernel::stalls): rare without memory
# pressure. The kernel takes a stack with the first event of each wait.
STALL_EVENTS="vmscan:mm_vmscan_direct_reclaim_begin vmscan:mm_vmscan_direct_reclaim_end vmscan:mm_vmscan_memcg_reclaim_begin vmscan:mm_vmscan_memcg_reclaim_end vmscan:mm_vmscan_memcg_softlimit_reclaim_begin vmscan:mm_vmscan_memcg_softlimit_reclaim_end vmscan:mm_vmscan_node_reclaim_begin vmscan:mm_vmscan_node_reclaim_end vmscan:mm_vmscan_throttled vmscan:mm_vmscan_wakeup_kswapd vmscan:mm_vmscan_kswapd_wake vmscan:mm_vmscan_kswapd_sleep compaction:mm_compaction_try_to_compact_pages compaction:mm_compaction_begin compaction:mm_compaction_end compaction:mm_compaction_deferred compaction:mm_compaction_wakeup_kcompactd compaction:mm_compaction_kcompactd_wake compaction:mm_compaction_kcompactd_sleep oom:reclaim_retry_zone oom:compact_retry oom:mark_victim oom:wake_reaper oom:start_task_reaping oom:finish_task_reaping"
STACKED_STALL_EVENTS="vmscan:mm_vmscan_direct_reclaim_begin vmscan:mm_vmscan_memcg_reclaim_begin compaction:mm_compaction_try_to_compact_pages vmscan:mm_vmscan_wakeup_kswapd"

DEFAULT_EVENTS="kmalloc kfree kmem_cache_alloc kmem_cache_free mm_page_alloc mm_page_free mm_page_free_batched mm_page_alloc_zone_locked mm_page_pcpu_drain mm_page_alloc_extfrag kmalloc_node kmem_cache_alloc_node"

usage() {
    cat <<EOF
usage: $PROG [-d SECONDS] [-b KB] [-o DIR|FILE.tar|FILE.tar.gz] [-e EVENTS]
             [-t TRACEFS] [-S] [-P N] [-R] [-q] [-- COMMAND [ARGS...]]

Records the kernel's kmem tracepoints into a dump for
\`kmemtraced --import DUMP -o FILE.kmt\` on another machine.

  -d SECONDS  record for this long, without a COMMAND (default: until
              interrupted with Ctrl-C / SIGTERM); with one, recording lasts
              until it exits
  -b KB       per-CPU ring buffer size in KiB (default 2048)
  -o PATH     output: a directory, or a tar file if PATH ends in .tar
              (.tar.gz / .tgz: gzip'd). Default ./kmemtrace-dump-<time>
  -e EVENTS   comma-separated events instead of the default kmem set:
              kmalloc, kmem:kmalloc, kmem/kmalloc, or kmem:* for all
  -t TRACEFS  tracefs mount point (default: /sys/kernel/tracing, mounting it
              if needed, else /sys/kernel/debug/tracing)
  -S          no kernel stacks with page allocations (by default the kernel
              takes them for the report's page call sites) nor with the
              stall events
  -P N        page stacks for 1 in N page frames, N a power of two up to
              1024 (default 16: frame numbers with bits 8-11 clear; the
              report scales what each stands for); 1: every allocation
  -R          no allocation stall events (by default, with the kmem set, the
              reclaim, compaction and OOM events the kernel has)
  -q          quiet: only errors
  -h          this help
  -- COMMAND  record while COMMAND runs

Needs root. Interrupt once to stop early (the dump is still completed);
twice to abort: what was recorded stays in the dump's directory.

Exit status, as every kmemtrace program's: 0 done, 2 usage error, 3 no
usable tracefs, 4 the output could not be written, 6 the recording failed;
aborted: 130 on SIGINT, 143 on SIGTERM, 129 on SIGHUP (128 + the signal).
EOF
}

say() { [ -n "$QUIET" ] || echo "$PROG: $*" >&2; }
warn() { echo "$PROG: warning: $*" >&2; }
# die CODE MESSAGE: the exit codes of every kmemtrace program.
die() {
    code=$1
    shift
    echo "$PROG: error: $*" >&2
    exit "$code"
}
E_USAGE=2
E_TRACEFS=3
E_OUTPUT=4
E_FAILED=6

# --- options -----------------------------------------------------------------
DURATION=
BUF_KB=2048
OUT=
EVENTS_OPT=
TRACEFS=
QUIET=
NO_STACKS=
NO_STALLS=
PAGE_SAMPLE=16
while getopts "d:b:o:e:t:SRP:qh" opt; do
    case $opt in
    d) DURATION=$OPTARG ;;
    b) BUF_KB=$OPTARG ;;
    o) OUT=$OPTARG ;;
    e) EVENTS_OPT=$OPTARG ;;
    t) TRACEFS=$OPTARG ;;
    S) NO_STACKS=1 ;;
    R) NO_STALLS=1 ;;
    P) PAGE_SAMPLE=$OPTARG ;;
    q) QUIET=1 ;;
    h) usage; exit 0 ;;
    *) usage >&2; exit "$E_USAGE" ;;
    esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift

is_uint() {
    case $1 in '' | *[!0-9]*) return 1 ;; esac
    return 0
}
if [ -n "$DURATION" ] && ! is_uint "$DURATION"; then
    echo "$PROG: error: -d wants whole seconds, not '$DURATION'" >&2
    exit "$E_USAGE"
fi
# -P: the frame-number bits from 8 up that a sampled page's are clear of
# (kmemtrace_import::stacks::pfn_sample_filter writes the same filter).
if ! is_uint "$PAGE_SAMPLE" || [ "$PAGE_SAMPLE" -lt 1 ] || [ "$PAGE_SAMPLE" -gt 1024 ] ||
    [ $((PAGE_SAMPLE & (PAGE_SAMPLE - 1))) -ne 0 ]; then
    echo "$PROG: error: -P wants a power of two from 1 to 1024, not '$PAGE_SAMPLE'" >&2
    exit "$E_USAGE"
fi
PAGE_FILTER=
[ "$PAGE_SAMPLE" -gt 1 ] && PAGE_FILTER=$(printf '!(pfn & 0x%x)' $(((PAGE_SAMPLE - 1) << 8)))
if ! is_uint "$BUF_KB" || [ "$BUF_KB" -lt 4 ]; then
    echo "$PROG: error: -b wants a size in KiB of at least 4, not '$BUF_KB'" >&2
    exit "$E_USAGE"
fi

# --- preconditions -----------------------------------------------------------
[ "$(id -u 2>/dev/null)" = 0 ] || die $E_TRACEFS "must run as root (tracefs instances need it)"

find_tracefs() {
    if [ -n "$TRACEFS" ]; then
        [ -d "$TRACEFS/instances" ] || die $E_TRACEFS "$TRACEFS is not a tracefs mount (no instances/ directory)"
        return
    fi
    for t in /sys/kernel/tracing /sys/kernel/debug/tracing; do
        if [ -d "$t/instances" ]; then
            TRACEFS=$t
            return
        fi
    done
    if [ -d /sys/kernel/tracing ] && mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null &&
        [ -d /sys/kernel/tracing/instances ]; then
        TRACEFS=/sys/kernel/tracing
        return
    fi
    if [ -d /sys/kernel/debug ] && [ ! -d /sys/kernel/debug/tracing ]; then
        mount -t debugfs nodev /sys/kernel/debug 2>/dev/null
    fi
    if [ -d /sys/kernel/debug/tracing/instances ]; then
        TRACEFS=/sys/kernel/debug/tracing
        return
    fi
    die $E_TRACEFS "no tracefs: the kernel lacks CONFIG_FTRACE/tracefs, or it cannot be mounted at /sys/kernel/tracing"
}
find_tracefs

# A sleep of a tenth of a second if this busybox can, else one second.
NAP=0.1
sleep "$NAP" 2>/dev/null || NAP=1

STAMP=$(date +%Y%m%d-%H%M%S 2>/dev/null || echo now)
[ -n "$OUT" ] || OUT=./kmemtrace-dump-$STAMP
case $OUT in
*.tar) TARMODE=plain ;;
*.tar.gz | *.tgz) TARMODE=gz ;;
*) TARMODE= ;;
esac
if [ -n "$TARMODE" ]; then
    WORK=$OUT.d
else
    WORK=$OUT
fi
[ -e "$OUT" ] && die $E_OUTPUT "$OUT already exists: choose another -o"
[ -e "$WORK" ] && die $E_OUTPUT "$WORK already exists: choose another -o"
mkdir -p "$WORK" 2>/dev/null || die $E_OUTPUT "cannot create $WORK (read-only file system? use -o /tmp/...)"
CTL=$WORK/.kmt-ctl
mkdir -p "$CTL" || die $E_OUTPUT "cannot create $CTL"

INST_NAME=kmt-capture-$$
INST=$TRACEFS/instances/$INST_NAME
STATE=setup         # setup, recording, draining, done
INTERRUPTS=0
STOP_REASON=
READER_PIDS=
CPUS=

# --- cleanup (always) --------------------------------------------------------
kill_readers() {
    for p in $READER_PIDS; do kill "$p" 2>/dev/null; done
    for c in $CPUS; do
        [ -f "$CTL/dd.$c" ] && kill "$(cat "$CTL/dd.$c")" 2>/dev/null
    done
    for p in $READER_PIDS; do wait "$p" 2>/dev/null; done
    READER_PIDS=
}

remove_instance() {
    [ -d "$INST" ] || return 0
    echo 0 >"$INST/tracing_on" 2>/dev/null
    for t in $TRIGGERS; do echo '!stacktrace' >"$EVDIR/$t/trigger" 2>/dev/null; done
    echo 0 >"$INST/events/enable" 2>/dev/null
    n=0
    while ! rmdir "$INST" 2>/dev/null; do
        n=$((n + 1))
        if [ $n -ge 25 ]; then
            warn "could not remove tracefs instance $INST; remove it with: rmdir $INST"
            return 1
        fi
        sleep "$NAP"
    done
}

cleanup() {
    trap - EXIT INT TERM HUP
    kill_readers
    # dd processes that were started but whose pid file was not yet read.
    for c in $CPUS; do
        [ -f "$CTL/dd.$c" ] && kill "$(cat "$CTL/dd.$c")" 2>/dev/null
    done
    remove_instance
    rm -rf "$CTL"
    if [ "$STATE" = setup ]; then
        rm -rf "$WORK" 2>/dev/null
    elif [ "$STATE" != done ]; then
        warn "capture incomplete; what was recorded is in $WORK"
    fi
}

on_signal() {
    INTERRUPTS=$((INTERRUPTS + 1))
    if [ "$STATE" = recording ] && [ $INTERRUPTS -eq 1 ]; then
        STOP_REASON="signal SIG$1"
        say "SIG$1: stopping (interrupt again to abort)"
        return
    fi
    echo "$PROG: SIG$1: aborted" >&2
    cleanup
    # 128 + the signal's number, as the shell reports a process it killed.
    case $1 in
    HUP) exit 129 ;;
    INT) exit 130 ;;
    *) exit 143 ;;
    esac
}
trap cleanup EXIT
trap 'on_signal INT' INT
trap 'on_signal TERM' TERM
trap 'on_signal HUP' HUP

# --- the instance --------------------------------------------------------------
mkdir "$INST" 2>/dev/null || die $E_TRACEFS "cannot create tracefs instance $INST"
echo 0 >"$INST/tracing_on" || die $E_TRACEFS "cannot write $INST/tracing_on"
echo "$BUF_KB" >"$INST/buffer_size_kb" 2>/dev/null ||
    die $E_USAGE "cannot set a $BUF_KB KiB per-CPU buffer (not enough memory? try a smaller -b)"

[ -f "$INST/events/header_page" ] || die $E_TRACEFS "$INST/events/header_page is missing: cannot describe the ring buffer"
# Sub-buffer size: buffer_subbuf_size_kb where the kernel has it (6.8+), else
# data offset + size from header_page (= the page size).
SUBBUF=
if [ -f "$INST/buffer_subbuf_size_kb" ]; then
    kb=$(cat "$INST/buffer_subbuf_size_kb")
    is_uint "$kb" && SUBBUF=$((kb * 1024))
fi
hp_off=$(sed -n 's/.*char data;[^o]*offset:\([0-9]*\);.*/\1/p' "$INST/events/header_page")
hp_size=$(sed -n 's/.*char data;.*size:\([0-9]*\);.*/\1/p' "$INST/events/header_page")
HP_SUBBUF=
is_uint "$hp_off" && is_uint "$hp_size" && HP_SUBBUF=$((hp_off + hp_size))
[ -n "$SUBBUF" ] || SUBBUF=$HP_SUBBUF
is_uint "$SUBBUF" && [ "$SUBBUF" -gt 0 ] || die $E_TRACEFS "cannot find the sub-buffer size (buffer_subbuf_size_kb or header_page)"
if [ -n "$HP_SUBBUF" ] && [ "$HP_SUBBUF" != "$SUBBUF" ]; then
    warn "buffer_subbuf_size_kb says $SUBBUF bytes but header_page $HP_SUBBUF; using $SUBBUF"
fi

# CPUs: the instance's per_cpu directories.
for d in "$INST"/per_cpu/cpu[0-9]*; do
    [ -d "$d" ] || continue
    CPUS="$CPUS ${d##*/cpu}"
done
[ -n "$CPUS" ] || die $E_TRACEFS "$INST/per_cpu has no cpuN directories"

# Events.
EVDIR=$INST/events
ENABLED=
enable_event() { # system event explicit
    if [ -f "$EVDIR/$1/$2/enable" ]; then
        if echo 1 >"$EVDIR/$1/$2/enable" 2>/dev/null; then
            ENABLED="$ENABLED $1/$2"
        else
            warn "cannot enable $1:$2"
        fi
    elif [ "$3" = explicit ]; then
        warn "the kernel has no event $1:$2"
    fi
}
if [ -n "$EVENTS_OPT" ]; then
    for e in $(echo "$EVENTS_OPT" | sed 's/,/ /g'); do
        case $e in
        *:*) sys=${e%%:*} ev=${e#*:} ;;
        */*) sys=${e%%/*} ev=${e#*/} ;;
        *) sys=kmem ev=$e ;;
        esac
        if [ "$ev" = "*" ] || [ "$ev" = all ]; then
            for d in "$EVDIR/$sys"/*/; do
                d=${d%/}
                [ -f "$d/enable" ] && enable_event "$sys" "${d##*/}" implicit
            done
        else
            enable_event "$sys" "$ev" explicit
        fi
    done
else
    for ev in $DEFAULT_EVENTS; do enable_event kmem "$ev" implicit; done
    if [ -z "$NO_STALLS" ]; then
        for e in $STALL_EVENTS; do enable_event "${e%%:*}" "${e#*:}" implicit; done
    fi
fi
[ -n "$ENABLED" ] || die $E_USAGE "none of the requested events exists on this kernel (see $EVDIR/kmem)"

# --- metadata that does not change -------------------------------------------
copy() { # src dst: copy a file if readable; empty dst if not
    cat "$1" >"$2" 2>/dev/null || rm -f "$2"
}
mkdir -p "$WORK/events" || die $E_OUTPUT "cannot write into $WORK"
copy "$EVDIR/header_page" "$WORK/events/header_page"
copy "$EVDIR/header_event" "$WORK/events/header_event"
for e in $ENABLED; do
    sys=${e%/*}
    [ -d "$WORK/events/$sys" ] && continue
    for d in "$EVDIR/$sys"/*/; do
        d=${d%/}
        [ -f "$d/format" ] || continue
        n=${d##*/}
        mkdir -p "$WORK/events/$sys/$n"
        copy "$d/format" "$WORK/events/$sys/$n/format"
        copy "$d/id" "$WORK/events/$sys/$n/id"
    done
done
: >"$WORK/enabled_events"
for e in $ENABLED; do echo "$e" >>"$WORK/enabled_events"; done

uname -a >"$WORK/uname" 2>/dev/null
for f in s n r v m; do uname -$f >"$WORK/uname_$f" 2>/dev/null; done
PAGE=$(getconf PAGESIZE 2>/dev/null)
if ! is_uint "$PAGE"; then
    PAGE=$(sed -n 's/^KernelPageSize: *\([0-9]*\) kB.*/\1/p' /proc/self/smaps 2>/dev/null | sed -n 1p)
    if is_uint "$PAGE"; then PAGE=$((PAGE * 1024)); else PAGE=$HP_SUBBUF; fi
fi
echo "$PAGE" >"$WORK/page_size_bytes"
NCPU=0
for c in $CPUS; do NCPU=$((NCPU + 1)); done
echo "$NCPU" >"$WORK/nproc"
copy /sys/devices/system/cpu/online "$WORK/cpus_online"
for n in /sys/devices/system/node/node[0-9]*; do
    [ -f "$n/cpulist" ] && echo "${n##*/node} $(cat "$n/cpulist")"
done >"$WORK/node_cpulist" 2>/dev/null
[ -s "$WORK/node_cpulist" ] || rm -f "$WORK/node_cpulist"
copy "$INST/trace_clock" "$WORK/trace_clock"
copy "$INST/buffer_size_kb" "$WORK/buffer_size_kb"
copy "$INST/buffer_subbuf_size_kb" "$WORK/buffer_subbuf_size_kb"
copy "$TRACEFS/printk_formats" "$WORK/printk_formats"
copy /proc/modules "$WORK/modules"
copy /proc/pagetypeinfo "$WORK/pagetypeinfo"
copy /proc/sys/vm/min_free_kbytes "$WORK/min_free_kbytes"
# The byte order of this userland's ELF binaries (EI_DATA: 1 little, 2 big),
# which is the kernel's.
ei=$(od -An -tu1 -j5 -N1 /proc/self/exe 2>/dev/null | sed 's/[^0-9]//g')
case $ei in
1) echo little >"$WORK/endianness" ;;
2) echo big >"$WORK/endianness" ;;
esac

for c in $CPUS; do
    mkdir -p "$WORK/per_cpu/cpu$c"
    : >"$WORK/per_cpu/cpu$c/trace_pipe_raw"
    copy "$INST/per_cpu/cpu$c/stats" "$WORK/per_cpu/cpu$c/stats.start"
done
copy "$TRACEFS/saved_cmdlines" "$WORK/saved_cmdlines.start"

# --- readers ---------------------------------------------------------------------
# One loop per CPU. A read of trace_pipe_raw returns one whole sub-buffer, but
# a reader that has caught up with the writer gets a sub-buffer holding just
# the few events written since, and the reader's own work (dd writing its
# file) makes those events: a dd left reading fills the dump with nearly empty
# sub-buffers, and a loop that starts dd for every sub-buffer makes, by
# forking, the events that fill the next one. So each loop polls the CPU's
# `bytes:` (unread bytes in the ring buffer, from its stats file, read with
# the shell's own `read`) every $NAP s and runs `dd count=<whole sub-buffers'
# worth>` once a sixteenth of the buffer is filled.
# A read may also return 0 (end of file) while tracing runs, when the reader
# caught up and an event arrived in between, and, on recent kernels, when the
# buffer is empty and tracing is off; older kernels block instead. Once the
# stop file exists (tracing is off), the loop runs one more dd without a
# count to drain everything, partial last sub-buffer included, then ends; a dd
# blocked on an empty buffer is killed by the main script (nothing is in
# flight then).
DATA_SIZE=$SUBBUF
is_uint "$hp_off" && [ "$hp_off" -lt "$SUBBUF" ] && DATA_SIZE=$((SUBBUF - hp_off))
read -r kb_now _ <"$INST/buffer_size_kb"
is_uint "$kb_now" || kb_now=$BUF_KB
MIN_BATCH=$((kb_now * 1024 / SUBBUF / 16))
[ "$MIN_BATCH" -ge 1 ] || MIN_BATCH=1
reader_loop() { # cpu
    r_src=$INST/per_cpu/cpu$1/trace_pipe_raw
    r_dst=$WORK/per_cpu/cpu$1/trace_pipe_raw
    r_stats=$INST/per_cpu/cpu$1/stats
    r_last=
    while :; do
        r_count=
        if [ -e "$CTL/stop" ]; then
            r_last=1
        else
            r_bytes=
            r_entries=0
            while read -r r_k r_v; do
                case $r_k in
                bytes:) r_bytes=$r_v ;;
                entries:) r_entries=$r_v ;;
                esac
            done <"$r_stats"
            if [ -n "$r_bytes" ]; then
                r_count=$((r_bytes / DATA_SIZE))
            elif [ "$r_entries" -gt 0 ]; then
                r_count=1 # no bytes: line (very old kernel)
            else
                r_count=0
            fi
            if [ "$r_count" -lt "$MIN_BATCH" ]; then
                sleep "$NAP"
                continue
            fi
        fi
        dd if="$r_src" bs="$SUBBUF" ${r_count:+count=$r_count} 2>/dev/null >>"$r_dst" &
        echo $! >"$CTL/dd.$1"
        wait $!
        rm -f "$CTL/dd.$1"
        [ -n "$r_last" ] && break
        sleep "$NAP"
    done
    : >"$CTL/done.$1"
}
for c in $CPUS; do
    reader_loop "$c" &
    READER_PIDS="$READER_PIDS $!"
done


# --- record ------------------------------------------------------------------
quote() { # shell-quote each argument, space-separated
    q_out=
    for q_a in "$@"; do
        q_out="$q_out '$(printf '%s' "$q_a" | sed "s/'/'\\\\''/g")'"
    done
    printf '%s' "${q_out# }"
}
COMMAND=$(quote "$@")

# A stack with each page allocation (and each wait's first stall event), in
# this instance only; set with the event enabled and tracing off (a trigger
# on a disabled event soft-disables it: stacks of allocations not recorded).
STACKS=
TRIGGERS=
stack_trigger() { # system/event [FILTER]: set the trigger (with the filter
    # where the kernel takes it), a line in page_stacks
    if [ -n "${2:-}" ] && echo "stacktrace if $2" >"$EVDIR/$1/trigger" 2>/dev/null; then
        TRIGGERS="$TRIGGERS $1"
        echo "${1%%/*}:${1#*/} stacktrace if $2" >>"$WORK/page_stacks"
    elif echo stacktrace >"$EVDIR/$1/trigger" 2>/dev/null; then
        TRIGGERS="$TRIGGERS $1"
        echo "${1%%/*}:${1#*/} stacktrace" >>"$WORK/page_stacks"
    else
        warn "the kernel refused the stacktrace trigger on ${1%%/*}:${1#*/}: no stacks with it"
    fi
}
if [ -z "$NO_STACKS" ] && [ -f "$EVDIR/ftrace/kernel_stack/format" ]; then
    case " $ENABLED " in
    *" kmem/mm_page_alloc "*) stack_trigger kmem/mm_page_alloc "$PAGE_FILTER" ;;
    esac
    for e in $STACKED_STALL_EVENTS; do
        case " $ENABLED " in
        *" ${e%%:*}/${e#*:} "*) stack_trigger "${e%%:*}/${e#*:}" ;;
        esac
    done
    if [ -n "$TRIGGERS" ]; then
        mkdir -p "$WORK/events/ftrace/kernel_stack"
        copy "$EVDIR/ftrace/kernel_stack/format" "$WORK/events/ftrace/kernel_stack/format"
        STACKS=1
    fi
fi

START_WALL=$(date +%s)
STATE=recording
echo 1 >"$INST/tracing_on" || die $E_FAILED "cannot start tracing ($INST/tracing_on)"
say "recording$(for e in $ENABLED; do printf ' %s' "${e#*/}"; done) on $NCPU CPUs into $WORK (instance $INST_NAME, sub-buffer $SUBBUF bytes)"

CMD_STATUS=
if [ $# -gt 0 ]; then
    if [ -n "$DURATION" ]; then
        warn "-d is ignored with a command: recording lasts while the command runs"
    fi
    "$@"
    CMD_STATUS=$?
    [ -n "$STOP_REASON" ] || STOP_REASON="command exited $CMD_STATUS"
elif [ -n "$DURATION" ]; then
    # Whole-second sleeps (a signal is acted on when the current one ends),
    # and few processes started: they would be traced too.
    end=$((START_WALL + DURATION))
    while [ -z "$STOP_REASON" ] && [ "$(date +%s)" -lt "$end" ]; do
        sleep 1
    done
    [ -n "$STOP_REASON" ] || STOP_REASON=duration
else
    say "press Ctrl-C (or send SIGTERM) to stop"
    while [ -z "$STOP_REASON" ]; do sleep 1; done
fi

# --- stop and drain ----------------------------------------------------------
STATE=draining
echo 0 >"$INST/tracing_on"
END_WALL=$(date +%s)
for c in $CPUS; do copy "$INST/per_cpu/cpu$c/stats" "$WORK/per_cpu/cpu$c/stats"; done
: >"$CTL/stop"
# Wait until every reader loop ended by itself (recent kernels: a read of an
# empty buffer with tracing off returns 0), or until every buffer is empty and
# the files stopped growing (older kernels: the last read blocks); then end
# the readers. If a reader had died and left data behind, drain it here.
fsize() { # size of a file, without reading it
    set -- $(ls -ln "$1" 2>/dev/null)
    echo "${5:-0}"
}
unread() { # events left in a CPU's ring buffer
    u_n=
    while read -r u_k u_v; do
        [ "$u_k" = entries: ] && u_n=$u_v
    done <"$INST/per_cpu/cpu$1/stats"
    echo "${u_n:-0}"
}
wait_drained() { # marker-prefix: wait for $CTL/<prefix>.N or empty+stable
    if [ "$NAP" = 1 ]; then w_max=30; else w_max=300; fi
    w_polls=0
    w_stable=0
    w_prev=
    while :; do
        w_done=1
        w_empty=1
        w_sizes=
        for c in $CPUS; do
            [ -e "$CTL/$1.$c" ] || w_done=
            w_sizes="$w_sizes $(fsize "$WORK/per_cpu/cpu$c/trace_pipe_raw")"
            [ "$(unread "$c")" = 0 ] || w_empty=
        done
        [ -n "$w_done" ] && return 0
        if [ -n "$w_empty" ] && [ "$w_sizes" = "$w_prev" ]; then
            w_stable=$((w_stable + 1))
        else
            w_stable=0
        fi
        [ $w_stable -ge 3 ] && return 0
        w_polls=$((w_polls + 1))
        [ $w_polls -ge $w_max ] && return 1
        w_prev=$w_sizes
        sleep "$NAP"
    done
}
DRAIN=complete
wait_drained done
kill_readers
left=
for c in $CPUS; do
    if [ "$(unread "$c")" = 0 ]; then
        : >"$CTL/drained.$c"
        continue
    fi
    left=1
    (
        dd if="$INST/per_cpu/cpu$c/trace_pipe_raw" bs="$SUBBUF" 2>/dev/null \
            >>"$WORK/per_cpu/cpu$c/trace_pipe_raw" &
        echo $! >"$CTL/dd.$c"
        wait $!
        rm -f "$CTL/dd.$c"
        : >"$CTL/drained.$c"
    ) &
    READER_PIDS="$READER_PIDS $!"
done
if [ -n "$left" ]; then
    wait_drained drained || DRAIN=incomplete
    kill_readers
fi
for c in $CPUS; do
    copy "$INST/per_cpu/cpu$c/stats" "$WORK/per_cpu/cpu$c/stats.after_drain"
    e=$(sed -n 's/^entries: *//p' "$WORK/per_cpu/cpu$c/stats.after_drain")
    if [ -n "$e" ] && [ "$e" != 0 ]; then
        warn "cpu$c: $e events were left in the ring buffer (not drained)"
        DRAIN=incomplete
    fi
done

# --- metadata gathered at the end --------------------------------------------
copy "$TRACEFS/saved_cmdlines" "$WORK/saved_cmdlines"
copy "$TRACEFS/saved_tgids" "$WORK/saved_tgids"
copy /proc/kallsyms "$WORK/kallsyms"
remove_instance
{
    echo "tool=kmemtrace-capture.sh"
    echo "version=$KMT_VERSION"
    echo "instance=$INST_NAME"
    echo "tracefs=$TRACEFS"
    echo "subbuf_size=$SUBBUF"
    echo "buffer_size_kb_requested=$BUF_KB"
    echo "events=$(echo $ENABLED | sed 's/ /,/g')"
    echo "start_wall_s=$START_WALL"
    echo "end_wall_s=$END_WALL"
    echo "stop_reason=$STOP_REASON"
    [ -n "$CMD_STATUS" ] && echo "exit_status=$CMD_STATUS"
    [ -n "$COMMAND" ] && echo "command=$COMMAND"
    [ -n "$DURATION" ] && echo "duration_s=$DURATION"
    echo "drain=$DRAIN"
} >"$WORK/capture_info"
rm -rf "$CTL"

total=0
for c in $CPUS; do
    b=$(fsize "$WORK/per_cpu/cpu$c/trace_pipe_raw")
    total=$((total + b))
done

if [ -n "$TARMODE" ]; then
    if [ "$TARMODE" = gz ]; then zflag=z; else zflag=; fi
    if tar -c${zflag}f "$OUT" -C "$WORK" . 2>"$WORK.tar-err"; then
        rm -rf "$WORK" "$WORK.tar-err"
    else
        STATE=done
        die $E_OUTPUT "tar failed ($(sed -n 1p "$WORK.tar-err")); the dump is in $WORK"
    fi
fi
STATE=done
say "$STOP_REASON; $((total / SUBBUF)) sub-buffers ($total bytes) from $NCPU CPUs in $OUT"
say "turn it into a log elsewhere with: kmemtraced --import $OUT -o capture.kmt"
exit 0
