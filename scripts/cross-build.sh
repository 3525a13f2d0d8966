#!/bin/bash
# Static kmemtraced, kmemtrace-check and kmemtrace-report for boards: one
# file each, no shared library, stripped. Prints each binary's size.
#
#   scripts/cross-build.sh [--install] [TARGET...]
#
# TARGETs (default: the first three):
#   aarch64-unknown-linux-musl       arm64 boards
#   armv7-unknown-linux-gnueabihf    32-bit ARM, hard float (static glibc:
#                                    rustup has no armv7 musl target here)
#   x86_64-unknown-linux-musl        x86_64 targets and boot-time images
#   i686-unknown-linux-musl          32-bit x86
#
# --install first adds what is missing (root, Debian): the rustup targets and
# the cross C compilers zstd is built with (gcc-aarch64-linux-gnu,
# gcc-arm-linux-gnueabihf, gcc-i686-linux-gnu, musl-tools).
#
# Environment: OUT=DIR (default target/boards) gets DIR/TARGET/BINARY;
# TARGET_DIR=DIR (default target) is cargo's target directory;
# BOARD_OPT_LEVEL=s builds for size (docs/benchmarks.md, "Board binaries
# and emulated boards").
# The build profile is Cargo.toml's `board` (release, whole-program LTO).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/target/boards}
target_dir=${TARGET_DIR:-$root/target}
bins=(kmemtraced kmemtrace-check kmemtrace-report)

install=0
targets=()
for a in "$@"; do
  case $a in
    --install) install=1 ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) targets+=("$a") ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(aarch64-unknown-linux-musl armv7-unknown-linux-gnueabihf x86_64-unknown-linux-musl)

# The C compiler (for zstd) and the linker of each target; the Debian
# package that has them.
toolchain() {
  case $1 in
    aarch64-unknown-linux-musl) echo "aarch64-linux-gnu-gcc gcc-aarch64-linux-gnu" ;;
    armv7-unknown-linux-gnueabihf) echo "arm-linux-gnueabihf-gcc gcc-arm-linux-gnueabihf" ;;
    x86_64-unknown-linux-musl) echo "musl-gcc musl-tools" ;;
    i686-unknown-linux-musl) echo "i686-linux-gnu-gcc gcc-i686-linux-gnu" ;;
    *) echo "unknown target $1 (see --help)" >&2; exit 2 ;;
  esac
}

if [ $install = 1 ]; then
  rustup target add "${targets[@]}"
  pkgs=()
  for t in "${targets[@]}"; do
    read -r cc pkg < <(toolchain "$t")
    command -v "$cc" >/dev/null || pkgs+=("$pkg")
  done
  if [ ${#pkgs[@]} -gt 0 ]; then
    # A mirror caught mid-sync fails one list; the others still serve.
    apt-get update -qq || echo "cross-build: apt-get update failed in part" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}" >/dev/null
  fi
fi

installed=$(rustup target list --installed 2>/dev/null || true)
for t in "${targets[@]}"; do
  read -r cc pkg < <(toolchain "$t")
  grep -qx "$t" <<<"$installed" || { echo "rustup target $t is not installed (--install adds it)" >&2; exit 2; }
  command -v "$cc" >/dev/null || { echo "$cc is missing: apt-get install $pkg (or --install)" >&2; exit 2; }
done

printf '%-32s %-18s %10s\n' target binary bytes
for t in "${targets[@]}"; do
  read -r cc pkg < <(toolchain "$t")
  key=$(echo "$t" | tr 'a-z-' 'A-Z_')
  # musl targets link statically by default; glibc needs +crt-static.
  flags="-C target-feature=+crt-static"
  # x86_64 musl links with the host's cc (musl-gcc wraps it for zstd only).
  linker=$cc
  [ "$t" = x86_64-unknown-linux-musl ] && linker=cc
  env "CC_${t//-/_}=$cc" "CARGO_TARGET_${key}_LINKER=$linker" \
    "CARGO_TARGET_${key}_RUSTFLAGS=$flags" \
    ${BOARD_OPT_LEVEL:+CARGO_PROFILE_BOARD_OPT_LEVEL=$BOARD_OPT_LEVEL} \
    cargo build --profile board -q --manifest-path "$root/Cargo.toml" --target "$t" \
    --target-dir "$target_dir" "${bins[@]/#/--package=}"
  mkdir -p "$out/$t"
  for b in "${bins[@]}"; do
    src=$target_dir/$t/board/$b
    # The host's strip reads any ELF machine binutils knows; the cross
    # gcc packages bring their own.
    strip_tool=${cc%gcc}strip
    [ "$t" = x86_64-unknown-linux-musl ] && strip_tool=strip
    "$strip_tool" -o "$out/$t/$b" "$src"
    if ! file -L "$out/$t/$b" | grep -q 'statically linked\|static-pie'; then
      echo "$out/$t/$b is not static" >&2
      exit 1
    fi
    printf '%-32s %-18s %10d\n' "$t" "$b" "$(stat -c %s "$out/$t/$b")"
  done
done
echo "binaries in $out/TARGET/" >&2
