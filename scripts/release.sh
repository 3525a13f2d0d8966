#!/bin/bash
# Release artifacts for boards, from one command: static binaries for each
# target (scripts/cross-build.sh), a tarball per target with them, the
# busybox capture script, FORMAT.md, the README and the licences, and
# SHA256SUMS over the tarballs.
#
#   scripts/release.sh [--install] [--no-build] [OUT_DIR]
#
# OUT_DIR (default target/release-artifacts) gets
# kmemtrace-VERSION-TARGET.tar.gz for aarch64-unknown-linux-musl,
# armv7-unknown-linux-gnueabihf, x86_64-unknown-linux-musl and
# i686-unknown-linux-musl, and SHA256SUMS (`sha256sum -c SHA256SUMS`).
# --install: cross-build.sh --install (rustup targets, cross compilers).
# --no-build: package the binaries already in target/boards (or BOARDS=DIR),
# for the targets found there.
# The tarballs are reproducible: names sorted, owner root, modification
# times SOURCE_DATE_EPOCH (default: the last commit's time), gzip -n.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
targets=(aarch64-unknown-linux-musl armv7-unknown-linux-gnueabihf x86_64-unknown-linux-musl i686-unknown-linux-musl)
bins=(kmemtraced kmemtrace-check kmemtrace-report)
boards=${BOARDS:-$root/target/boards}
build=1
install=()
out=
for a in "$@"; do
  case $a in
    --install) install=(--install) ;;
    --no-build) build=0 ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "release.sh: unknown option $a (see --help)" >&2; exit 2 ;;
    *) out=$a ;;
  esac
done
out=${out:-$root/target/release-artifacts}

if [ $build = 1 ]; then
  OUT=$boards "$root/scripts/cross-build.sh" "${install[@]}" "${targets[@]}"
else
  present=()
  for t in "${targets[@]}"; do
    [ -x "$boards/$t/kmemtraced" ] && present+=("$t")
  done
  [ ${#present[@]} -gt 0 ] || { echo "release.sh: no board binaries in $boards (run without --no-build)" >&2; exit 3; }
  targets=("${present[@]}")
fi

# The version the binaries say (the host cannot run every target's: the
# workspace's own).
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -1)
epoch=${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)}
mkdir -p "$out"
out=$(cd "$out" && pwd)
stage=$(mktemp -d "${TMPDIR:-/tmp}/kmemtrace-release.XXXXXX")
trap 'rm -rf "$stage"' EXIT

tarballs=()
for t in "${targets[@]}"; do
  name=kmemtrace-$version-$t
  dir=$stage/$name
  mkdir -p "$dir"
  for b in "${bins[@]}"; do
    install -m 0755 "$boards/$t/$b" "$dir/$b"
  done
  install -m 0755 "$root/kmemtraced/kmemtrace-capture.sh" "$dir/"
  install -m 0644 "$root/format-spec/FORMAT.md" "$root/README.md" \
    "$root/LICENSE-MIT" "$root/LICENSE-APACHE" "$dir/"
  tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner \
    --mtime="@$epoch" -cf - "$name" | gzip -9n >"$out/$name.tar.gz"
  tarballs+=("$name.tar.gz")
done
(cd "$out" && sha256sum "${tarballs[@]}" >SHA256SUMS)
printf '%s\n' "${tarballs[@]/#/$out/}" "$out/SHA256SUMS"
