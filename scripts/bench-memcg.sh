# Sourced by the benchmarks that put a load under memory pressure:
#   CG=$(memcg_create NAME BYTES) || exit 2
# makes a memory cgroup NAME limited to BYTES (v1's memory.limit_in_bytes,
# else v2's memory.max under /sys/fs/cgroup or /sys/fs/cgroup/unified,
# enabling the memory controller there) and prints its path; the caller
# removes it (rmdir) when done.
memcg_create() {
  local name=$1 bytes=$2 cg r
  if [ -f /sys/fs/cgroup/memory/memory.limit_in_bytes ]; then
    cg=/sys/fs/cgroup/memory/$name
    mkdir "$cg" && echo "$bytes" > "$cg/memory.limit_in_bytes" && echo "$cg" && return 0
    return 1
  fi
  for r in /sys/fs/cgroup /sys/fs/cgroup/unified; do
    grep -qw memory "$r/cgroup.controllers" 2>/dev/null || continue
    echo +memory > "$r/cgroup.subtree_control" 2>/dev/null || true
    cg=$r/$name
    mkdir "$cg" && echo "$bytes" > "$cg/memory.max" && echo "$cg" && return 0
    return 1
  done
  echo "no memory cgroup controller" >&2
  return 1
}
