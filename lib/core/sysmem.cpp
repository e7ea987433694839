#include "core/sysmem.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <vector>

namespace infer {

namespace {

constexpr uint64_t kUnknown = std::numeric_limits<uint64_t>::max();

std::optional<std::string> read_text(const std::string& path) {
  std::ifstream f(path);
  if (!f) return std::nullopt;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A file holding one number ("max": no limit).
std::optional<uint64_t> read_number(const std::string& path) {
  const auto t = read_text(path);
  if (!t) return std::nullopt;
  std::istringstream in(*t);
  std::string w;
  if (!(in >> w) || w == "max") return std::nullopt;
  try {
    return std::stoull(w);
  } catch (...) {
    return std::nullopt;
  }
}

// The value of `key` in a "key value" file (memory.stat).
uint64_t stat_value(const std::string& path, const std::string& key) {
  const auto t = read_text(path);
  if (!t) return 0;
  std::istringstream in(*t);
  std::string k;
  uint64_t v;
  while (in >> k >> v)
    if (k == key) return v;
  return 0;
}

// "/a/b/c" -> {"/a/b/c", "/a/b", "/a", ""}: the cgroup and its ancestors
// (the empty one is the mount's root, which in a container is the
// container's own cgroup).
std::vector<std::string> ancestors(std::string p) {
  std::vector<std::string> out;
  while (!p.empty() && p.back() == '/') p.pop_back();
  for (;;) {
    out.push_back(p);
    if (p.empty()) break;
    const size_t slash = p.rfind('/');
    p = slash == std::string::npos ? std::string() : p.substr(0, slash);
  }
  return out;
}

uint64_t cgroup_available(const std::string& proc_root, const std::string& sys_root) {
  const auto cg = read_text(proc_root + "/self/cgroup");
  if (!cg) return kUnknown;
  uint64_t best = kUnknown;
  std::istringstream lines(*cg);
  for (std::string line; std::getline(lines, line);) {
    // "hierarchy-id:controllers:path"
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    const bool v2 = line.compare(0, a, "0") == 0 && controllers.empty();
    bool v1 = false;
    std::istringstream cs(controllers);
    for (std::string c; std::getline(cs, c, ',');) v1 = v1 || c == "memory";
    if (!v1 && !v2) continue;
    const std::string mount = sys_root + (v2 ? "/fs/cgroup" : "/fs/cgroup/memory");
    for (const std::string& dir : ancestors(path)) {
      const std::string d = mount + dir;
      const auto limit = read_number(d + (v2 ? "/memory.max" : "/memory.limit_in_bytes"));
      if (!limit || *limit >= (uint64_t{1} << 60)) continue;  // no limit here (v1 says "no limit" with ~2^63)
      const auto usage = read_number(d + (v2 ? "/memory.current" : "/memory.usage_in_bytes"));
      if (!usage) continue;
      const uint64_t reclaimable = stat_value(d + "/memory.stat", v2 ? "inactive_file" : "total_inactive_file");
      const uint64_t used = *usage > reclaimable ? *usage - reclaimable : 0;
      best = std::min(best, *limit > used ? *limit - used : 0);
    }
  }
  return best;
}

uint64_t mem_available(const std::string& proc_root) {
  const auto t = read_text(proc_root + "/meminfo");
  if (!t) return kUnknown;
  std::istringstream in(*t);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream f(line.substr(13));
    uint64_t kb;
    if (f >> kb) return kb * 1024;
  }
  return kUnknown;
}

}  // namespace

uint64_t available_memory_bytes(const std::string& proc_root, const std::string& sys_root) {
  return std::min(mem_available(proc_root), cgroup_available(proc_root, sys_root));
}

uint64_t available_memory_bytes() { return available_memory_bytes("/proc", "/sys"); }

}  // namespace infer
