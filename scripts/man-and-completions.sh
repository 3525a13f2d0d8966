#!/bin/sh
# Man pages and shell completions of the five programs and the fleet job,
# written by the programs themselves from the definitions `--help` prints
# (clap's; the job's argparse's), so they never drift from it:
#
#   scripts/man-and-completions.sh BIN_DIR OUT_DIR
#
# writes OUT_DIR/man/man1/PROGRAM.1 and OUT_DIR/completions/bash/PROGRAM,
# OUT_DIR/completions/zsh/_PROGRAM, OUT_DIR/completions/fish/PROGRAM.fish.
set -eu
[ $# -eq 2 ] || { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
bin=$1
out=$2
programs="kmemtraced kmemtrace-report kmemtrace-check kmemtrace-diff kmemtrace-export"
mkdir -p "$out/man/man1" "$out/completions/bash" "$out/completions/zsh" "$out/completions/fish"
for p in $programs; do
  [ -x "$bin/$p" ] || { echo "no $bin/$p: build it first (cargo build --release)" >&2; exit 3; }
  "$bin/$p" --generate-man >"$out/man/man1/$p.1"
  "$bin/$p" --generate-completions bash >"$out/completions/bash/$p"
  "$bin/$p" --generate-completions zsh >"$out/completions/zsh/_$p"
  "$bin/$p" --generate-completions fish >"$out/completions/fish/$p.fish"
done
# The fleet job (python3), from the source tree.
job=$(cd "$(dirname "$0")/.." && pwd)/kmemtrace-diff/fleet/kmemtrace_fleet_diff.py
p=kmemtrace-fleet-diff
python3 "$job" --generate-man >"$out/man/man1/$p.1"
for sh in bash zsh fish; do
  case $sh in bash) f=$p ;; zsh) f=_$p ;; fish) f=$p.fish ;; esac
  python3 "$job" --generate-completions $sh >"$out/completions/$sh/$f"
done
