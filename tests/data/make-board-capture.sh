#!/bin/bash
# Makes tests/data/board-ARCH.kmt and board-ARCH.trace.txt.gz: a capture
# recorded inside an emulated board by the static board build of
# kmemtraced, with the guest kernel's own `trace` text of the same buffer,
# and prints the recorder's cost inside the guest. Not run by the tests
# (they use the files); run it, as root on Debian, to make them again:
#
#   tests/data/make-board-capture.sh arm64|armhf
#   environment: OUT=DIR writes the files there (default: tests/data);
#                KERNEL_DEB=, BUSYBOX_DEB= use these packages instead of
#                downloading Debian's (linux-image-arm64 /
#                linux-image-armmp-lpae, busybox-static of that arch);
#                ROUNDS=N rounds of the load for the cost (default 100);
#                BUFFER_KB=N both recorders' buffer per CPU there (default
#                1024); KMEMTRACED_ARGS adds options to kmemtraced's.
#
# Needs qemu-system-arm, dpkg-deb, python3, and what scripts/cross-build.sh
# needs (it is run with --install). The board is qemu's `virt` machine
# under software emulation (TCG), 2 CPUs, booting Debian's own kernel with
# a busybox initramfs whose init:
#  1. enables the kmem events in the top-level buffer, runs a small
#     allocation load, stops tracing, prints the kernel's `trace` text, then
#     drains the same buffer with `kmemtraced --boot` (the text is printed
#     with no_hash_pointers, so pointers are real);
#  2. records the same load with kmemtraced in its own instance and prints
#     its summary line (events, recorder CPU);
#  3. where the initramfs has the guest architecture's own trace-cmd
#     (Debian's package and its libraries; TRACE_CMD=0 leaves it out),
#     records a fixed load system-wide with each recorder in turn, the same
#     six kmem events and buffer size, and prints each one's CPU, events
#     and bytes; then each recorder for as long without the load, whose
#     CPU (start-up, reading kallsyms and the formats, idle wake-ups) is
#     taken off to give the cost per event net of what does not depend on
#     the events.
# The capture and text come back base64-encoded over the serial console.
set -euo pipefail

arch=${1:?usage: $0 arm64|armhf}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${OUT:-$here}
case $arch in
  arm64) target=aarch64-unknown-linux-musl; flavour=arm64
         qemu=(qemu-system-aarch64 -M virt -cpu cortex-a57) ;;
  armhf) target=armv7-unknown-linux-gnueabihf; flavour=armmp-lpae
         qemu=(qemu-system-arm -M virt,highmem=off -cpu cortex-a15) ;;
  *) echo "unknown ARCH $arch: arm64 or armhf" >&2; exit 2 ;;
esac
for t in "${qemu[0]}" dpkg-deb cpio gzip base64 python3; do
  command -v "$t" >/dev/null || { echo "missing $t (apt-get install qemu-system-arm cpio)" >&2; exit 2; }
done

work=$(mktemp -d /tmp/kmt-board.XXXXXX)
trap 'rm -rf "$work"' EXIT

# Debian's kernel and static busybox for the board's architecture.
# The architecture's package lists come first: the kernel's versioned
# package name is looked up in them (on a fresh machine they are not there).
with_arch() {
  dpkg --print-foreign-architectures | grep -qx "$arch" || {
    dpkg --add-architecture "$arch"
    # A mirror caught mid-sync fails one list; the others still serve.
    apt-get update -qq || echo "apt-get update failed in part" >&2; }
}
fetch() { # PACKAGE -> path of its .deb, downloaded from Debian's archive
  with_arch
  local d
  d=$(mktemp -d "$work/deb.XXXXXX")
  (cd "$d" && apt-get download -qq "$1" >/dev/null)
  ls "$d"/*.deb
}
kernel_deb=${KERNEL_DEB:-}
if [ -z "$kernel_deb" ]; then
  with_arch
  versioned=$(apt-cache depends "linux-image-$flavour:$arch" | awk '/Depends: linux-image-/ {print $2; exit}')
  kernel_deb=$(fetch "$versioned")
fi
busybox_deb=${BUSYBOX_DEB:-$(fetch "busybox-static:$arch")}
mkdir -p "$work/k" "$work/bb"
dpkg-deb -x "$kernel_deb" "$work/k"
dpkg-deb -x "$busybox_deb" "$work/bb"
vmlinuz=$(ls "$work"/k/boot/vmlinuz-* | head -1)

# The static board build.
OUT="$work/boards" "$root/scripts/cross-build.sh" --install "$target" >&2

mkdir -p "$work/rd"/{bin,proc,sys,dev,tmp}
# The guest's own trace-cmd, with the libraries it loads.
if [ "${TRACE_CMD:-1}" = 1 ]; then
  for p in trace-cmd libtraceevent1 libtracefs1 libtraceevent1-plugin libzstd1 libc6 libgcc-s1; do
    dpkg-deb -x "$(fetch "$p:$arch")" "$work/rd"
  done
fi
cp "$work/bb/bin/busybox" "$work/rd/bin/busybox"
cp "$work/boards/$target/kmemtraced" "$work/boards/$target/kmemtrace-check" "$work/rd/"
cat >"$work/rd/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin:/usr/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs dev /dev
mount -t tracefs nodev /sys/kernel/tracing
mount -t tmpfs tmp /tmp
t=/sys/kernel/tracing
# A small allocation load: files made, read and removed, directories listed.
load() {
  i=0
  while [ $i -lt 200 ]; do echo "$i" > /tmp/f$i; i=$((i + 1)); done
  cat /tmp/f* > /dev/null
  rm -f /tmp/f*
  ls -l /sys/kernel/tracing/events/kmem > /dev/null 2>&1
}
events="kmalloc kfree kmem_cache_alloc kmem_cache_free mm_page_alloc mm_page_free"
echo "KMT-INFO: kernel $(uname -r) $(uname -m), $(nproc) CPUs, clock $(sed 's/.*\[\(.*\)\].*/\1/' $t/trace_clock)"
echo 0 > $t/tracing_on
echo 4096 > $t/buffer_size_kb
echo > $t/trace
for e in $events; do echo 1 > $t/events/kmem/$e/enable; done
echo 1 > $t/tracing_on
load
echo 0 > $t/tracing_on
for e in $events; do echo 0 > $t/events/kmem/$e/enable; done
echo KMT-TEXT-BEGIN
gzip -9 -c $t/trace | base64
echo KMT-TEXT-END
/kmemtraced --boot -o /tmp/board.kmt 2>/tmp/err
echo "KMT-RC: $?"
cat /tmp/err
echo KMT-LOG-BEGIN
base64 /tmp/board.kmt
echo KMT-LOG-END
# The recorder's cost, in its own instance, under three rounds of the load.
/kmemtraced -o /tmp/live.kmt -- sh -c '. /load.sh; load; load; load' 2>/tmp/live.err
echo "KMT-LIVE-RC: $?"
echo "KMT-LIVE: $(grep 'events in' /tmp/live.err)"
# The summary's count (the kernel's `read events`, a 32-bit kernel's too)
# against the events in the log.
echo "KMT-LIVE-CHECK: $(/kmemtrace-check /tmp/live.kmt 2>&1 | tail -1)"
# Beside trace-cmd: each recorder started, given 8 s to settle, ROUNDS
# rounds of the load run, then stopped with SIGINT; its CPU time (its
# threads and the children it reaped) read from the shell that waited for
# it. With 0 rounds it waits as long as NAME's loaded run took instead.
cs() { read -r up _ < /proc/uptime; echo "${up%.*}${up#*.}"; } # uptime in 1/100 s
cost() { # NAME ROUNDS COMMAND...: prints NAME's CPU milliseconds
  name=$1; rounds=$2; shift 2
  sh -c '"$@" >/dev/null 2>/tmp/$0.err & echo $! > /tmp/$0.pid; wait $!; set -- $(cat /proc/$$/stat)
         echo "${14}" "${15}" "${16}" "${17}" > /tmp/$0.ticks' "$name" "$@" &
  sleep 8
  start=$(cs)
  if [ "$rounds" = 0 ]; then sleep "$(cat /tmp/$name.took)"; fi
  r=0; while [ $r -lt "$rounds" ]; do load; r=$((r + 1)); done
  # Seconds with two decimals, for busybox's sleep.
  [ "$rounds" = 0 ] || { t=$(($(cs) - start)); printf '%d.%02d\n' $((t / 100)) $((t % 100)) > /tmp/$name.took; }
  sleep 1
  kill -INT "$(cat /tmp/$name.pid)"; wait
  set -- $(cat /tmp/$name.ticks)
  echo "cpu $((($1 + $2 + $3 + $4) * 10)) ms"
}
if [ -x /usr/bin/trace-cmd ]; then
  kmem=kmem:kmalloc,kmem:kfree,kmem:kmem_cache_alloc,kmem:kmem_cache_free,kmem:mm_page_alloc,kmem:mm_page_free
  kcmd="/kmemtraced -o /tmp/k.kmt -b @BUFFER_KB@ --page-stacks off -e $kmem @KMEMTRACED_ARGS@"
  tcmd="trace-cmd record -q -b @BUFFER_KB@ $(echo $kmem | sed 's/,/ /g; s/kmem:/-e kmem:/g') -o /tmp/t.dat"
  c=$(cost k @ROUNDS@ $kcmd)
  echo "KMT-COST-KMEMTRACED: $c, $(stat -c %s /tmp/k.kmt) bytes; $(grep 'events in' /tmp/k.err)"
  echo "KMT-COST-CHECK: $(/kmemtrace-check /tmp/k.kmt 2>&1 | tail -1)"
  c=$(cost t @ROUNDS@ $tcmd)
  n=$(trace-cmd report -i /tmp/t.dat 2>/dev/null | grep -c ': \(kmalloc\|kfree\|kmem_cache_alloc\|kmem_cache_free\|mm_page_alloc\|mm_page_free\):')
  echo "KMT-COST-TRACE-CMD: $c, $(stat -c %s /tmp/t.dat) bytes; $n events"
  echo "KMT-FIXED-KMEMTRACED: $(cost k 0 $kcmd) for $(cat /tmp/k.took) s"
  echo "KMT-FIXED-TRACE-CMD: $(cost t 0 $tcmd) for $(cat /tmp/t.took) s"
fi
poweroff -f
EOF
# The cost run's settings into /init (options are split on spaces there).
extra=${KMEMTRACED_ARGS:-}
case $extra in *[\"\$\`\\\'\&\|]*)
  echo "KMEMTRACED_ARGS: options without quotes, \\, \$, \`, & or |" >&2; exit 2 ;;
esac
sed -i "s|@ROUNDS@|${ROUNDS:-100}|; s|@BUFFER_KB@|${BUFFER_KB:-1024}|; s|@KMEMTRACED_ARGS@|$extra|" "$work/rd/init"
# The load again, for the recording in step 2.
sed -n '/^load() {/,/^}/p' "$work/rd/init" >"$work/rd/load.sh"
chmod +x "$work/rd/init"
(cd "$work/rd" && find . | cpio -o -H newc 2>/dev/null | gzip -1) >"$work/initrd.gz"

timeout 1500 "${qemu[@]}" -m 1024 -smp 2 -nographic -no-reboot \
  -kernel "$vmlinuz" -initrd "$work/initrd.gz" \
  -append "console=ttyAMA0 rdinit=/init panic=-1 no_hash_pointers" \
  >"$work/console.log" 2>&1 || true

python3 - "$work/console.log" "$out" "$arch" <<'PY'
import base64, sys
t = open(sys.argv[1], 'rb').read().decode('latin1').replace('\r', '')
out, arch = sys.argv[2], sys.argv[3]
def between(a, b):
    i = t.index(a) + len(a)
    body = t[i:t.index(b, i)]
    return base64.b64decode(''.join(l.strip() for l in body.splitlines()
                                    if l.strip() and not l.strip().startswith('[')))
def line(tag):
    return t[t.index(tag):].split('\n')[0].strip() if tag in t else f"{tag} missing"
if line('KMT-RC:') != 'KMT-RC: 0':
    sys.exit(f"kmemtraced --boot in the guest: {line('KMT-RC:')}\n{t[-3000:]}")
open(f"{out}/board-{arch}.trace.txt.gz", 'wb').write(between('KMT-TEXT-BEGIN', 'KMT-TEXT-END'))
open(f"{out}/board-{arch}.kmt", 'wb').write(between('KMT-LOG-BEGIN', 'KMT-LOG-END'))
for tag in ('KMT-INFO', 'KMT-LIVE-RC', 'KMT-LIVE:', 'KMT-COST-KMEMTRACED', 'KMT-COST-TRACE-CMD',
            'KMT-FIXED-KMEMTRACED', 'KMT-FIXED-TRACE-CMD'):
    print(line(tag))
# Per event, under the load and net of the run without it.
import re
def found(tag, pattern):
    m = re.search(pattern, line(tag))
    return int(m.group(1).replace(',', '')) if m else None
rows = {}
for name, tag in (('kmemtraced', 'KMEMTRACED'), ('trace-cmd', 'TRACE-CMD')):
    cpu = found('KMT-COST-' + tag, r'cpu (\d+) ms')
    fixed = found('KMT-FIXED-' + tag, r'cpu (\d+) ms')
    n = found('KMT-COST-' + tag, r'(?:bytes; |kmemtraced: )([\d,]+) events')
    size = found('KMT-COST-' + tag, r', (\d+) bytes;')
    if None in (cpu, fixed, n, size) or n == 0:
        continue
    rows[name] = (cpu * 1e3 / n, (cpu - fixed) * 1e3 / n)
    print(f"{name}: {n} events, CPU {cpu} ms ({fixed} ms without the load): "
          f"{rows[name][0]:.1f} us/event, {rows[name][1]:.1f} net; {size / n:.1f} bytes/event")
if len(rows) == 2 and min(rows['trace-cmd']) > 0:
    k, tc = rows['kmemtraced'], rows['trace-cmd']
    print(f"kmemtraced / trace-cmd CPU per event: {k[0] / tc[0]:.2f}x, {k[1] / tc[1]:.2f}x net")
# The recorder's summary counts what the kernel says its readers took;
# kmemtrace-check counts the log's events. Nothing was lost: the same.
for run, check in (('KMT-LIVE:', 'KMT-LIVE-CHECK'), ('KMT-COST-KMEMTRACED', 'KMT-COST-CHECK')):
    if check not in t:
        continue
    said = found(run, r'kmemtraced: ([\d,]+) events')
    counted = found(check, r'OK \(([\d,]+) events')
    print(line(check))
    if said is None or said != counted:
        sys.exit(f"{run} the summary says {said} events; kmemtrace-check: {line(check)}")
PY
ls -l "$out/board-$arch".*
