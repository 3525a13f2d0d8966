#!/bin/sh
# The main job, end to end: record the kernel's kmem events while a workload
# runs, check the capture, and report on it.
#
#   tests/demo.sh [OUTPUT.kmt]
#
# Where this machine cannot trace (not root, no tracefs), the bundled real
# capture tests/data/sample-x86_64.kmt is checked and reported instead.
set -eu
cd "$(dirname "$0")/.."
out=${1:-target/demo.kmt}

echo "== building (release)" >&2
cargo build --release --bins --quiet
bin=${CARGO_TARGET_DIR:-target}/release

can_trace() {
  [ "$(id -u)" = 0 ] || return 1
  [ -d /sys/kernel/tracing/instances ] || mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
  [ -d /sys/kernel/tracing/instances ]
}

if can_trace; then
  echo "== recording: kmemtraced -o $out -- <workload>" >&2
  if command -v stress-ng >/dev/null 2>&1; then
    workload="stress-ng --quiet --metrics-brief --malloc 2 --vm 1 --vm-bytes 64M --dentry 1 --timeout 3s"
  else
    workload="sh -c 'd=\$(mktemp -d); for i in \$(seq 2000); do echo \$i > \$d/f\$i; done; cat \$d/* >/dev/null; rm -rf \$d'"
  fi
  eval "$bin/kmemtraced -o \"$out\" -- $workload"
else
  echo "== this machine cannot trace (needs root and tracefs): using the bundled real capture" >&2
  mkdir -p "$(dirname "$out")"
  cp tests/data/sample-x86_64.kmt "$out"
fi

echo "== checking: kmemtrace-check $out" >&2
status=0
$bin/kmemtrace-check "$out" || status=$?
case $status in
  0) ;;
  1) echo "(the capture lost events: findings near the losses are marked uncertain)" >&2 ;;
  *) echo "the capture is damaged or unusable (exit $status)" >&2; exit "$status" ;;
esac

echo "== reporting: kmemtrace-report $out --html ${out%.kmt}.html" >&2
$bin/kmemtrace-report -l 15 "$out" --html "${out%.kmt}.html"
echo "(the same report with plots: ${out%.kmt}.html, one file, open it in any browser)" >&2

echo "== the first events, as the kernel's trace file prints them: kmemtrace-report --events $out --event 'kmalloc,mm_page_alloc'" >&2
# `head` closes the pipe early: the listing stops quietly.
# (the recorder's own threads, listed as the kernel wrote them, left out here)
$bin/kmemtrace-report --events -q --event 'kmalloc,mm_page_alloc' "$out" |
  grep -v -e '^ *kmemtraced-[0-9]' -e '^ *kmt-[a-z0-9]*-[0-9]' | head -n 24
