// How much memory this process can still commit: the KV pool is allocated
// lazily (pages are committed when first written), so an engine whose pool
// does not fit would otherwise be created fine and then OOM-killed at its
// first steps, with no status the host could handle.
#pragma once

#include <cstdint>
#include <string>

namespace infer {

// The smallest of: MemAvailable (/proc/meminfo), and for every memory cgroup
// limit above this process (cgroup v2 memory.max, v1 memory.limit_in_bytes,
// from the process's own cgroup up to the hierarchy's root) the limit minus
// the cgroup's usage, not counting its inactive page cache (reclaimable).
// UINT64_MAX when none of these can be read.
uint64_t available_memory_bytes();

// The same with the /proc and /sys trees read under other roots (tests).
uint64_t available_memory_bytes(const std::string& proc_root, const std::string& sys_root);

}  // namespace infer
