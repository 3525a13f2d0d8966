#!/bin/sh
# trace-cmd on this machine, recording into a tracefs instance of the
# caller's (so tests that run in parallel keep out of each other's way):
#
#   trace-cmd-in-instance.sh NAME record -B NAME -e kmem:kmalloc -o t.dat -- CMD...
#
# The kernel here refuses writes to the function-tracer knobs
# (ftrace_enabled, set_ftrace_filter, ...) that trace-cmd touches even when
# it records events only, in the top level and in every instance. Inside a
# private mount namespace those knobs are covered with scratch files. The
# instance is made here, so its knobs exist to be covered; the caller
# removes it afterwards (rmdir), as trace-cmd leaves an instance it did not
# make. Needs root, unshare and trace-cmd.
set -eu
if [ "${KMT_TC_INNER:-}" != 1 ]; then
  command -v trace-cmd >/dev/null || { echo "trace-cmd is not installed" >&2; exit 2; }
  KMT_TC_INNER=1 exec unshare -m "$0" "$@"
fi
name=$1
shift
T=/sys/kernel/tracing
[ -e $T/events ] || mount -t tracefs nodev $T 2>/dev/null || true
I=$T/instances/$name
mkdir -p "$I"
scratch=$(mktemp -d)
for f in /proc/sys/kernel/ftrace_enabled; do
  [ -e "$f" ] || continue
  echo 1 > "$scratch/ftrace_enabled"
  mount --bind "$scratch/ftrace_enabled" "$f"
done
for dir in $T $I; do
  for k in set_ftrace_filter set_ftrace_notrace set_graph_function set_graph_notrace \
           set_ftrace_pid set_ftrace_notrace_pid; do
    [ -e "$dir/$k" ] || continue
    d=$scratch/$(echo "$dir/$k" | tr / _)
    : > "$d"
    mount --bind "$d" "$dir/$k"
  done
done
exec trace-cmd "$@"
