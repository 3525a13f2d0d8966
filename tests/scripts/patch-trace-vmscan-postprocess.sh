#!/bin/bash
# Writes a copy of the kernel's Documentation/trace/postprocess/
# trace-vmscan-postprocess.pl (Mel Gorman, IBM 2009; GPL-2.0, the kernel's
# licence) patched for the text of newer kernels (checked on 6.1), for
# tests/scripts/stalls_vs_postprocess.sh. The script itself is not kept in
# this repository (its licence is not this project's): this takes it from
# kernel sources and patches it, only where the newer text needs it:
#
#  1. The event formats are read from $TRACE_FORMAT_DIR/<system>/<event>/format
#     (default: /sys/kernel/debug/tracing/events, the script's own path)
#     instead of always this machine's: a trace from another kernel is read
#     with that kernel's formats, or with the defaults below where the
#     directory has none (TRACE_FORMAT_DIR=/nonexistent).
#  2. mm_vmscan_direct_reclaim_begin lost `may_writepage` (4.x): its default
#     regex and expected fields are `order gfp_flags`.
#  3. mm_vmscan_wakeup_kswapd lost `zid` (4.x): its default regex and
#     expected fields are `nid order gfp_flags`, the order is the second
#     field ($2, was $3).
#  4. The latency-format flags column: newer kernels print more states
#     (irqs-off `D` and `b`, need-resched `B` and `L`, hardirq `Z` and `z`);
#     a line with one of them did not match at all and was skipped.
# Nothing else is changed (the task name pattern still stops at characters
# other than letters, digits and `-`: `load.sh-125` reads as `sh-125`).
#
#   tests/scripts/patch-trace-vmscan-postprocess.sh [SOURCE] > trace-vmscan-postprocess.pl
#   SOURCE: the script itself, a kernel source tree, or a linux-source-*.tar.xz
#   (Debian's linux-source-6.1 package); default: $LINUX_SRC, else the newest
#   /usr/src/linux-source-*.tar.xz, else /usr/src/linux.
set -euo pipefail

rel=Documentation/trace/postprocess/trace-vmscan-postprocess.pl
src=${1:-${LINUX_SRC:-$(ls /usr/src/linux-source-*.tar.xz 2>/dev/null | sort -V | tail -1)}}
src=${src:-/usr/src/linux}
tmp=$(mktemp -d /tmp/kmt-postprocess.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
if [ -f "$src" ] && [[ $src == *.tar* ]]; then
  tar -xf "$src" -C "$tmp" --wildcards "*/$rel" 2>/dev/null || { echo "no $rel in $src" >&2; exit 2; }
  orig=$(ls "$tmp"/*/"$rel")
  from="$(basename "$src"):${orig#"$tmp"/}"
elif [ -d "$src" ]; then
  orig=$src/$rel
  from="$orig"
else
  orig=$src
  from="$orig"
fi
[ -r "$orig" ] || {
  echo "no $rel (give a kernel tree, the script, or apt-get install linux-source-6.1)" >&2; exit 2; }
sum=$(sha256sum "$orig" | cut -d' ' -f1)
ver=$(dpkg-query -W -f='${Version}' "$(basename "${from%%:*}" .tar.xz)" 2>/dev/null || true)

FROM="$from${ver:+ (Debian package version $ver)}" SUM="$sum" perl -0777 -pe '
  my $n = 0;
  sub need { my ($what, $k) = @_; $k == 1 or die "patch-trace-vmscan-postprocess: \"$what\" matched $k times, not once (another version of the script?)\n"; $n++ }
  need("format path", s{open \(FORMAT, "/sys/kernel/debug/tracing/events/\$event/format"\)}
                      {open (FORMAT, (\$ENV{TRACE_FORMAT_DIR} // "/sys/kernel/debug/tracing/events") . "/\$event/format")}g);
  need("direct_begin default", s{order=\(\[0-9\]\*\) may_writepage=\(\[0-9\]\*\) gfp_flags=}{order=([0-9]*) gfp_flags=}g);
  need("direct_begin fields", s{"order", "may_writepage",(\s*)"gfp_flags"\);}{"order",$1"gfp_flags");}g);
  need("wakeup_kswapd default", s{(regex_wakeup_kswapd_default = .nid=\(\[0-9\]\*\)) zid=\(\[0-9\]\*\)}{$1}g);
  need("wakeup_kswapd fields", s{"nid", "zid", "order", "gfp_flags"\);}{"nid", "order", "gfp_flags");}g);
  need("wakeup_kswapd order", s{(regex_wakeup_kswapd/o\) \{(?:[^{}]*)\}\s*)my \$order = \$3;}{$1my \$order = \$2;}g);
  need("flags column", s{\[dX\.\]\[Nnp\.\]\[Hhs\.\]}{[dDbX.][NnpBL.][HhsZz.]}g);
  s{\A(#![^\n]*\n)}{$1 . join("", map { "# $_\n" }
    "PATCHED COPY, made by kmemtrace tests/scripts/patch-trace-vmscan-postprocess.sh",
    "from $ENV{FROM}",
    "(sha256 $ENV{SUM}). Changed for the text of newer kernels (see that script):",
    " 1. formats from \$TRACE_FORMAT_DIR (default /sys/kernel/debug/tracing/events);",
    " 2. mm_vmscan_direct_reclaim_begin: order gfp_flags (no may_writepage);",
    " 3. mm_vmscan_wakeup_kswapd: nid order gfp_flags (no zid), order is \$2;",
    " 4. the flags column takes D b / B L / Z z.",
    "The original text follows, changed only there.") . "#\n"}e or die "no #! line\n";
' "$orig"
