#!/bin/bash
# Makes tests/data/boot-6.1-x86_64.kmt and boot-6.1-x86_64.trace.txt.gz: a
# real boot-time capture of another kernel (Debian's 6.1), for `kmemtraced
# --boot` and the decoder. Not run by the tests (they use the files); run it
# to make the capture again, as root on Debian with:
#   apt-get install qemu-system-x86 linux-image-amd64 busybox-static
#
# The kernel boots under qemu (software emulation) with boot-time tracing on
# its command line (trace_event=kmem:..., no_hash_pointers so that the text
# prints real pointers, trace_clock=global: under emulation the TSC is
# unstable and the kernel would switch clocks at late_initcall, which empties
# the buffer of everything before). Its init stops tracing, prints the kernel's own
# `trace` text, then runs a static kmemtraced --boot, which drains the same
# events; both come back base64-encoded over the serial console.
#
#   tests/data/make-boot-capture.sh [VMLINUZ]
#   environment: OUT=DIR writes the two files there (default: tests/data);
#                TRACE_CLOCK= (empty) boots without trace_clock=, to see the
#                recorder note the clock switch that empties the buffer.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here}
clock=${TRACE_CLOCK-global}
root=$(cd "$here/../.." && pwd)
kernel=${1:-$(ls /boot/vmlinuz-6.1.* 2>/dev/null | sort -V | tail -1)}
[ -n "$kernel" ] && [ -r "$kernel" ] || { echo "no kernel image (apt-get install linux-image-amd64)" >&2; exit 2; }
for t in qemu-system-x86_64 busybox cpio gzip base64 python3; do
  command -v "$t" >/dev/null || { echo "missing $t" >&2; exit 2; }
done
file -L "$(command -v busybox)" | grep -q 'statically linked' || {
  echo "busybox must be static (apt-get install busybox-static)" >&2; exit 2; }

work=$(mktemp -d /tmp/kmt-boot.XXXXXX)
trap 'rm -rf "$work"' EXIT

# A static kmemtraced (glibc static-pie).
RUSTFLAGS="-C target-feature=+crt-static" cargo build --release -q -p kmemtraced \
  --manifest-path "$root/Cargo.toml" --target x86_64-unknown-linux-gnu --target-dir "$work/target"

mkdir -p "$work/rd"/{bin,proc,sys,dev,tmp}
cp "$(command -v busybox)" "$work/rd/bin/busybox"
strip -o "$work/rd/kmemtraced" "$work/target/x86_64-unknown-linux-gnu/release/kmemtraced"
cat >"$work/rd/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs dev /dev
mount -t tracefs nodev /sys/kernel/tracing
mount -t tmpfs tmp /tmp
t=/sys/kernel/tracing
echo 0 > $t/tracing_on
echo "KMT-INFO: kernel $(uname -r), buffer $(cat $t/buffer_size_kb) KiB, clock $(cat $t/trace_clock)"
echo KMT-TEXT-BEGIN
gzip -9 -c $t/trace | base64
echo KMT-TEXT-END
/kmemtraced --boot -o /tmp/boot.kmt 2>/tmp/err
echo "KMT-RC: $?"
cat /tmp/err
echo KMT-LOG-BEGIN
base64 /tmp/boot.kmt
echo KMT-LOG-END
poweroff -f
EOF
chmod +x "$work/rd/init"
(cd "$work/rd" && find . | cpio -o -H newc 2>/dev/null | gzip -1) >"$work/initrd.gz"

events=kmem:kmalloc,kmem:kfree,kmem:kmem_cache_alloc,kmem:kmem_cache_free,kmem:mm_page_alloc,kmem:mm_page_free
timeout 600 qemu-system-x86_64 -accel tcg -cpu max -m 512 -smp 2 -nographic -no-reboot \
  -kernel "$kernel" -initrd "$work/initrd.gz" \
  -append "console=ttyS0 rdinit=/init panic=-1 no_hash_pointers ${clock:+trace_clock=$clock} trace_event=$events trace_buf_size=4M" \
  >"$work/console.log" 2>&1

python3 - "$work/console.log" "$out" <<'PY'
import base64, sys
t = open(sys.argv[1], 'rb').read().decode('latin1')
def between(a, b):
    i = t.index(a) + len(a)
    body = t[i:t.index(b, i)]
    return base64.b64decode(''.join(l.strip() for l in body.splitlines()
                                    if l.strip() and not l.strip().startswith('[')))
rc = t[t.index('KMT-RC:'):].split('\n')[0].strip()
if rc != 'KMT-RC: 0':
    sys.exit(f"kmemtraced --boot in the guest: {rc}")
open(f"{sys.argv[2]}/boot-6.1-x86_64.trace.txt.gz", 'wb').write(between('KMT-TEXT-BEGIN', 'KMT-TEXT-END'))
open(f"{sys.argv[2]}/boot-6.1-x86_64.kmt", 'wb').write(between('KMT-LOG-BEGIN', 'KMT-LOG-END'))
print(t[t.index('KMT-INFO'):].split('\n')[0].strip())
PY
ls -l "$out"/boot-6.1-x86_64.*
