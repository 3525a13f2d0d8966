#!/bin/bash
# Makes tests/data/stalls-6.1-x86_64.kmt and stalls-6.1-x86_64.trace.txt.gz:
# a real capture of another kernel (Debian's 6.1) under GLOBAL memory
# pressure, for the stall analysis (`kmemtrace-report --stalls`): kswapd
# and direct reclaim, direct compaction (THP faults, hugetlb pages) and an
# OOM kill. Not run by the tests (they use the files); run it to make the
# capture again, as root on Debian with:
#   apt-get install qemu-system-x86 linux-image-amd64 busybox-static e2fsprogs gcc
#
# The kernel boots under qemu (software emulation, 2 vCPUs, 256 MiB, no
# swap) with no_hash_pointers and trace_clock=global (under emulation the
# TSC is unstable; both records use the global clock, so their timestamps
# compare). Its init loads the virtio disk and ext2 modules, mounts an ext2
# disk holding a file bigger than the guest's memory (vda) and an empty
# ext2 disk for the output (vdb), enables the stall events in a tracefs
# instance of its own (`text`: the kernel's own record of the same events,
# started a little before the log), and runs a static
#   kmemtraced -o /out/stalls.kmt --clock global -- /load.sh
# with its default events (kmem's and the stall events, a stack with each
# wait's first event), the recorder spared by the OOM killer. The load, one
# step after another:
#   (a) page cache: three readers of 128 MiB of the file at once (kswapd
#       cannot keep up: direct reclaim);
#   (b) drop_caches, THP on for madvise regions (the kernel leaves it off
#       below 512 MiB), then frag: nearly all free memory touched in small
#       pages and every other page freed (free memory in single pages),
#       then 16 MiB of MADV_HUGEPAGE faults (direct compaction, order 9);
#   (c) while frag holds its pages: nr_hugepages=24, three tries (order-9
#       allocations: try_to_compact_pages, deferrals, compact_retry);
#   (d) hog: more anonymous memory than there is, until the OOM killer
#       kills it (mark_victim).
# Then init stops the text instance, writes its `trace` (gzip) next to the
# log on vdb and powers off; the host takes both files off the disk image
# with debugfs. What the pressure does differs from run to run (direct
# reclaim counts vary with the host's load).
#
#   tests/data/make-stall-capture.sh [VMLINUZ]
#   environment: OUT=DIR writes the two files there (default: tests/data);
#                TARGET_DIR=DIR builds kmemtraced there and keeps it
#                (default: a temporary directory, removed);
#                KEEP=1 keeps the work directory (disk images, console log,
#                the guest's event formats in format/).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here}
root=$(cd "$here/../.." && pwd)
kernel=${1:-$(ls /boot/vmlinuz-6.1.* 2>/dev/null | sort -V | tail -1)}
[ -n "$kernel" ] && [ -r "$kernel" ] || { echo "no kernel image (apt-get install linux-image-amd64)" >&2; exit 2; }
krel=${kernel##*/vmlinuz-}                      # 6.1.0-56-amd64
kver=$(echo "$krel" | sed -E 's/^([0-9]+\.[0-9]+).*/\1/')   # 6.1
mods=/lib/modules/$krel
[ -d "$mods" ] || { echo "no $mods for $kernel" >&2; exit 2; }
for t in qemu-system-x86_64 busybox cpio gzip gcc mkfs.ext2 debugfs; do
  command -v "$t" >/dev/null || { echo "missing $t" >&2; exit 2; }
done
file -L "$(command -v busybox)" | grep -q 'statically linked' || {
  echo "busybox must be static (apt-get install busybox-static)" >&2; exit 2; }

work=$(mktemp -d /tmp/kmt-stalls.XXXXXX)
[ -n "${KEEP:-}" ] && echo "work directory: $work" || trap 'rm -rf "$work"' EXIT
target=${TARGET_DIR:-$work/target}

# A static kmemtraced (glibc static-pie).
RUSTFLAGS="-C target-feature=+crt-static" cargo build --release -q -p kmemtraced \
  --manifest-path "$root/Cargo.toml" --target x86_64-unknown-linux-gnu --target-dir "$target"

mkdir -p "$work/rd"/{bin,proc,sys,dev,tmp,mnt,out,lib/modules}
cp "$(command -v busybox)" "$work/rd/bin/busybox"
strip -o "$work/rd/kmemtraced" "$target/x86_64-unknown-linux-gnu/release/kmemtraced"

# The virtio disk and ext2 modules, in load order.
for m in drivers/virtio/virtio_ring drivers/virtio/virtio \
         drivers/virtio/virtio_pci_legacy_dev drivers/virtio/virtio_pci_modern_dev \
         drivers/virtio/virtio_pci drivers/block/virtio_blk \
         lib/crc16 crypto/crc32c_generic fs/mbcache fs/jbd2/jbd2 fs/ext4/ext4; do
  f=$(ls "$mods/kernel/$m".ko* | head -1)
  case $f in
    *.ko) cp "$f" "$work/rd/lib/modules/" ;;
    *.ko.xz) xz -dc "$f" >"$work/rd/lib/modules/$(basename "$m").ko" ;;
    *.ko.zst) zstd -qdc "$f" >"$work/rd/lib/modules/$(basename "$m").ko" ;;
  esac
  echo "$(basename "$m").ko" >>"$work/rd/lib/modules/order"
done

# The load's programs: small, static.
cat >"$work/frag.c" <<'EOF'
/* frag MIB THP_MIB SECONDS: touch MIB MiB of anonymous memory in small
 * pages, free every other page (free memory in single pages), touch
 * THP_MIB MiB with MADV_HUGEPAGE (THP faults compact directly), then hold
 * it all for SECONDS (or until killed). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
int main(int argc, char **argv)
{
	size_t mib = argc > 1 ? atol(argv[1]) : 64, thp = argc > 2 ? atol(argv[2]) : 16;
	int secs = argc > 3 ? atoi(argv[3]) : 10;
	long pg = sysconf(_SC_PAGESIZE);
	size_t len = mib << 20, i;
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) { perror("mmap"); return 1; }
	madvise(p, len, MADV_NOHUGEPAGE);
	for (i = 0; i < len; i += pg) p[i] = 1;
	for (i = 0; i < len; i += 2 * pg) madvise(p + i, pg, MADV_DONTNEED);
	printf("frag: %zu MiB touched, every other page freed\n", mib);
	fflush(stdout);
	if (thp) {
		size_t tl = thp << 20, huge = 2 << 20;
		char *q = mmap(NULL, tl + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (q == MAP_FAILED) { perror("mmap"); return 1; }
		q = (char *)(((unsigned long)q + huge - 1) & ~(huge - 1));
		madvise(q, tl, MADV_HUGEPAGE);
		for (i = 0; i < tl; i += pg) q[i] = 1;
		printf("frag: %zu MiB of MADV_HUGEPAGE touched\n", thp);
		fflush(stdout);
	}
	sleep(secs);
	return 0;
}
EOF
cat >"$work/hog.c" <<'EOF'
/* hog MIB: touch MIB MiB of anonymous memory, a MiB at a time, and hold
 * it: more than the machine has, so that the OOM killer kills it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv)
{
	size_t mib = argc > 1 ? atol(argv[1]) : 1024, i;
	for (i = 0; i < mib; i++) {
		char *p = malloc(1 << 20);
		if (!p) { printf("hog: malloc failed at %zu MiB\n", i); return 1; }
		memset(p, 0x5a, 1 << 20);
		if (i % 32 == 0) { printf("hog: %zu MiB\n", i); fflush(stdout); }
	}
	printf("hog: all %zu MiB, not killed\n", mib);
	return 0;
}
EOF
gcc -static -O2 -o "$work/rd/frag" "$work/frag.c"
gcc -static -O2 -o "$work/rd/hog" "$work/hog.c"

cat >"$work/rd/load.sh" <<'EOF'
#!/bin/sh
# The recorder is spared by the OOM killer (-1000, set by init); the load is not.
echo 0 > /proc/self/oom_score_adj
mb() { awk "/^$1:/"'{print int($2/1024)}' /proc/meminfo; }
echo "KMT-LOAD: page cache ($(mb MemFree) MiB free)"
# Three readers of 128 MiB each (more than the memory together, and more
# than kswapd keeps up with on 2 vCPUs: direct reclaim).
for skip in 0 80 160; do
  dd if=/mnt/big of=/dev/null bs=1M skip=$skip count=128 2>/dev/null &
done
wait
# Free memory again, then fill nearly all of it and free every other page:
# what is free is then in single pages, and high orders need compaction.
echo 1 > /proc/sys/vm/drop_caches
# Below 512 MiB the kernel leaves THP off: on for madvise(MADV_HUGEPAGE)
# regions (frag's), whose faults reclaim and compact directly. Only now:
# turning it on raises min_free_kbytes (khugepaged's), and with it the
# margin kswapd keeps ahead of direct reclaim.
echo madvise > /sys/kernel/mm/transparent_hugepage/enabled
echo madvise > /sys/kernel/mm/transparent_hugepage/defrag
free=$(mb MemFree)
min=$(($(cat /proc/sys/vm/min_free_kbytes) / 1024))
echo "KMT-LOAD: frag ($free MiB free, $min MiB min_free)"
/frag $((free - min - 8)) 16 60 >/tmp/frag.out &
frag=$!
while kill -0 $frag && ! grep -q 'MADV_HUGEPAGE touched' /tmp/frag.out; do sleep 1; done
cat /tmp/frag.out
echo "KMT-LOAD: $(grep AnonHugePages /proc/meminfo)"
echo "KMT-LOAD: hugetlb ($(mb MemFree) MiB free)"
# A failed attempt leaves the zone's compaction skip hints to be flushed
# when kswapd next sleeps: try again after a while.
for try in 1 2 3; do
  echo 24 > /proc/sys/vm/nr_hugepages
  echo "KMT-LOAD: hugepages $(cat /proc/sys/vm/nr_hugepages) of 24"
  [ "$(cat /proc/sys/vm/nr_hugepages)" -ge 24 ] && break
  sleep 1
done
echo 0 > /proc/sys/vm/nr_hugepages
kill $frag; wait $frag
echo "KMT-LOAD: hog ($(mb MemFree) MiB free)"
/hog 1024
echo "KMT-LOAD: hog exit $?"
sleep 1
EOF
chmod +x "$work/rd/load.sh"

cat >"$work/rd/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs dev /dev
mount -t tracefs nodev /sys/kernel/tracing
mount -t tmpfs tmp /tmp
for m in $(cat /lib/modules/order); do insmod /lib/modules/$m; done
fail() { echo "KMT-FAIL: $*"; poweroff -f; }
for n in 1 2 3 4 5 6 7 8 9 10; do [ -b /dev/vdb ] && break; sleep 1; done
mount -t ext2 -o ro /dev/vda /mnt || fail "mount /dev/vda"
mount -t ext2 /dev/vdb /out || fail "mount /dev/vdb"
t=/sys/kernel/tracing
i=$t/instances/text
mkdir $i
echo global > $i/trace_clock
echo 4096 > $i/buffer_size_kb
n=0
for e in vmscan/mm_vmscan_direct_reclaim_begin vmscan/mm_vmscan_direct_reclaim_end \
         vmscan/mm_vmscan_memcg_reclaim_begin vmscan/mm_vmscan_memcg_reclaim_end \
         vmscan/mm_vmscan_memcg_softlimit_reclaim_begin vmscan/mm_vmscan_memcg_softlimit_reclaim_end \
         vmscan/mm_vmscan_node_reclaim_begin vmscan/mm_vmscan_node_reclaim_end \
         vmscan/mm_vmscan_throttled vmscan/mm_vmscan_wakeup_kswapd \
         vmscan/mm_vmscan_kswapd_wake vmscan/mm_vmscan_kswapd_sleep \
         compaction/mm_compaction_try_to_compact_pages \
         compaction/mm_compaction_begin compaction/mm_compaction_end compaction/mm_compaction_deferred \
         compaction/mm_compaction_kcompactd_wake compaction/mm_compaction_kcompactd_sleep \
         compaction/mm_compaction_wakeup_kcompactd \
         oom/reclaim_retry_zone oom/compact_retry oom/mark_victim oom/wake_reaper \
         oom/start_task_reaping oom/finish_task_reaping; do
  if [ -d $i/events/$e ]; then echo 1 > $i/events/$e/enable; n=$((n+1)); else echo "KMT-INFO: no $e"; fi
done
echo 1 > $i/tracing_on
echo "KMT-INFO: kernel $(uname -r), $n stall events in instances/text, $(cat $i/buffer_size_kb) KiB, clock $(cat $i/trace_clock); $(grep MemTotal /proc/meminfo)"
# Spare the recorder (the load sets its own back to 0).
echo -1000 > /proc/self/oom_score_adj
/kmemtraced -o /out/stalls.kmt --clock global -- /load.sh 2>/tmp/err
echo "KMT-RC: $?"
cat /tmp/err
echo 0 > $i/tracing_on
echo "KMT-INFO: text instance: $(grep -c . $i/trace) lines; $(grep -E 'entries|overrun' $i/per_cpu/cpu*/stats | tr '\n' ' ')"
gzip -9 -c $i/trace > /out/trace.txt.gz
# The formats of these events (kept with KEEP=1: TRACE_FORMAT_DIR for
# tests/scripts/stalls_vs_postprocess.sh).
for e in vmscan compaction oom; do
  for f in $t/events/$e/*/format; do
    d=/out/format/${f#$t/events/}; mkdir -p ${d%/format}; cp $f $d
  done
done
sync
umount /out
echo KMT-DONE
poweroff -f
EOF
chmod +x "$work/rd/init"
(cd "$work/rd" && find . | cpio -o -H newc 2>/dev/null | gzip -1) >"$work/initrd.gz"

# vda: a file bigger than the guest's memory (not zeros: mkfs would leave holes).
mkdir "$work/fs"
head -c 288M /dev/urandom >"$work/fs/big"
mkfs.ext2 -q -F -d "$work/fs" "$work/in.img" 320M
rm -rf "$work/fs"
# vdb: the log and the text.
mkfs.ext2 -q -F "$work/out.img" 64M

timeout 900 qemu-system-x86_64 -accel tcg -cpu max -m 256 -smp 2 -nographic -no-reboot \
  -kernel "$kernel" -initrd "$work/initrd.gz" \
  -drive file="$work/in.img",format=raw,if=virtio,readonly=on \
  -drive file="$work/out.img",format=raw,if=virtio \
  -append "console=ttyS0 rdinit=/init panic=-1 no_hash_pointers trace_clock=global" \
  >"$work/console.log" 2>&1 || true

grep -a -E '^(KMT-|frag:|hog:)|Out of memory|Killed process' "$work/console.log" | tr -d '\r' || true
grep -aq '^KMT-FAIL' "$work/console.log" && { echo "the guest failed (console: $work/console.log)" >&2; KEEP=1; trap - EXIT; exit 1; }
grep -aq '^KMT-DONE' "$work/console.log" || { echo "the guest did not finish (console: $work/console.log)" >&2; KEEP=1; trap - EXIT; exit 1; }
grep -aq '^KMT-RC: 0' "$work/console.log" || { echo "kmemtraced in the guest failed" >&2; exit 1; }
debugfs -R "dump /stalls.kmt $out/stalls-$kver-x86_64.kmt" "$work/out.img" 2>/dev/null
debugfs -R "dump /trace.txt.gz $out/stalls-$kver-x86_64.trace.txt.gz" "$work/out.img" 2>/dev/null
if [ -n "${KEEP:-}" ]; then
  debugfs -R "rdump /format $work" "$work/out.img" 2>/dev/null
  echo "the guest's event formats: $work/format"
fi
chmod 644 "$out/stalls-$kver-x86_64".*
ls -l "$out/stalls-$kver-x86_64".*
size=$(stat -c %s "$out/stalls-$kver-x86_64.kmt")
[ "$size" -le $((4 << 20)) ] || echo "note: the log is over 4 MiB ($size bytes)" >&2
