#!/bin/sh
# A Debian package of the five programs, as dpkg installs them:
#
#   scripts/deb.sh BIN_DIR OUT_DIR     (prints the .deb's path)
#
# BIN_DIR holds kmemtraced, kmemtrace-{report,check,diff,export} (for example
# target/release after `cargo build --release`, or target/boards/TARGET from
# scripts/cross-build.sh with ARCH=arm64 and the like). The package holds
# the programs, the busybox capture script and the fleet job
# (kmemtrace-fleet-diff, for Spark or DuckDB; /usr/share/kmemtrace), man pages
# and bash, zsh and fish completions written by the programs themselves
# (scripts/man-and-completions.sh), and FORMAT.md with the JSON and Parquet
# schemas' documentation (/usr/share/doc/kmemtrace).
#
# Environment: ARCH (default: `dpkg --print-architecture`), the package's
# architecture, which must be the binaries'; STRIP (default: strip), a strip
# for them. Needs dpkg-deb.
set -eu
[ $# -eq 2 ] || { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
arch=${ARCH:-$(dpkg --print-architecture)}
programs="kmemtraced kmemtrace-report kmemtrace-check kmemtrace-diff kmemtrace-export"
version=$("$bin/kmemtraced" --version | head -1 | cut -d' ' -f2)

stage=$(mktemp -d "${TMPDIR:-/tmp}/kmemtrace-deb.XXXXXX")
trap 'rm -rf "$stage"' EXIT
pkg=$stage/kmemtrace
doc=$pkg/usr/share/doc/kmemtrace
mkdir -p "$pkg/DEBIAN" "$pkg/usr/bin" "$pkg/usr/share/kmemtrace" "$doc" \
  "$pkg/usr/share/man/man1" "$pkg/usr/share/bash-completion/completions" \
  "$pkg/usr/share/zsh/vendor-completions" "$pkg/usr/share/fish/vendor_completions.d"

# Stripped, as Debian ships programs (the line tables stay in BIN_DIR's
# copies); a strip that does not know the binaries' architecture leaves
# them whole.
for p in $programs; do
  install -m 0755 "$bin/$p" "$pkg/usr/bin/$p"
  "${STRIP:-strip}" --strip-unneeded "$pkg/usr/bin/$p" 2>/dev/null ||
    echo "deb.sh: $p left unstripped (STRIP=${STRIP:-strip} cannot strip it)" >&2
done
install -m 0755 "$root/kmemtraced/kmemtrace-capture.sh" "$pkg/usr/share/kmemtrace/"
# The fleet job: run as a program, or given to spark-submit (which takes a
# Python job by its .py name).
sed "s/^VERSION = .*/VERSION = \"$version\"/" "$root/kmemtrace-diff/fleet/kmemtrace_fleet_diff.py" \
  >"$pkg/usr/share/kmemtrace/kmemtrace_fleet_diff.py"
chmod 0755 "$pkg/usr/share/kmemtrace/kmemtrace_fleet_diff.py"
ln -s ../share/kmemtrace/kmemtrace_fleet_diff.py "$pkg/usr/bin/kmemtrace-fleet-diff"

gen=$stage/gen
"$root/scripts/man-and-completions.sh" "$bin" "$gen"
for p in $programs kmemtrace-fleet-diff; do
  gzip -9n <"$gen/man/man1/$p.1" >"$pkg/usr/share/man/man1/$p.1.gz"
  install -m 0644 "$gen/completions/bash/$p" "$pkg/usr/share/bash-completion/completions/$p"
  install -m 0644 "$gen/completions/zsh/_$p" "$pkg/usr/share/zsh/vendor-completions/_$p"
  install -m 0644 "$gen/completions/fish/$p.fish" "$pkg/usr/share/fish/vendor_completions.d/$p.fish"
done

install -m 0644 "$root/format-spec/FORMAT.md" "$doc/FORMAT.md"
for c in kmemtrace-report kmemtrace-check kmemtrace-diff; do
  install -m 0644 "$root/$c/JSON.md" "$doc/$c-JSON.md"
done
install -m 0644 "$root/kmemtrace-export/PARQUET.md" "$doc/PARQUET.md"
install -m 0644 "$root/README.md" "$doc/README.md"
gzip -9n <"$root/CHANGELOG.md" >"$doc/changelog.gz"
{
  echo "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
  echo "Upstream-Name: kmemtrace"
  echo
  echo "Files: *"
  echo "License: MIT or Apache-2.0"
  echo
  cat "$root/LICENSE-MIT"
} >"$doc/copyright"

# Binaries linked against glibc depend on the newest symbol version they
# use; static ones (musl, the board builds) on nothing.
depends=""
glibc=$(for p in $programs; do objdump -T "$bin/$p" 2>/dev/null; done |
  grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -Vu | tail -1)
[ -z "$glibc" ] || depends="Depends: libc6 (>= $glibc), libgcc-s1"
size=$(du -sk "$pkg/usr" | cut -f1)
{
  echo "Package: kmemtrace"
  echo "Version: $version"
  echo "Architecture: $arch"
  echo "Maintainer: kmemtrace developers <kmemtrace@example.invalid>"
  echo "Installed-Size: $size"
  [ -z "$depends" ] || echo "$depends"
  echo "Suggests: python3 (>= 3.11)"
  echo "Section: devel"
  echo "Priority: optional"
  echo "Homepage: https://example.invalid/kmemtrace"
  echo "Description: record and analyse the Linux kernel's memory tracepoints"
  echo " kmemtraced records the kmem, vmscan, compaction and OOM tracepoints"
  echo " through tracefs into a compact log; kmemtrace-report, -check, -diff"
  echo " and -export analyse it on any machine: slab and page call sites,"
  echo " leaks, misuse, allocation stalls, regressions between captures, and"
  echo " trace.dat, Perfetto and Parquet exports."
} >"$pkg/DEBIAN/control"

deb=$out/kmemtrace_${version}_$arch.deb
dpkg-deb --root-owner-group -Zxz --build "$pkg" "$deb" >/dev/null
echo "$deb"
