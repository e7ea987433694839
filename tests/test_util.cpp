#include "test_util.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>

namespace infer_test {

static bool exists(const std::string& p) {
  struct stat st{};
  return ::stat(p.c_str(), &st) == 0;
}

std::string shared_dir() {
  const char* env = std::getenv("INFER_SHARED_DIR");
  std::string dir = env && *env ? env : std::string(INFER_SOURCE_DIR) + "/../shared";
  return exists(dir) ? dir : std::string();
}

std::string shared_file(const std::string& rel) {
  std::string dir = shared_dir();
  if (dir.empty()) return std::string();
  std::string p = dir + "/" + rel;
  return exists(p) ? p : std::string();
}

std::string temp_dir() {
  const char* env = std::getenv("INFER_TEST_TMP");
  std::string dir = env && *env ? env : std::string(INFER_BINARY_DIR) + "/tests/tmp";
  ::mkdir(dir.c_str(), 0755);
  dir += "/" + std::to_string(::getpid());
  ::mkdir(dir.c_str(), 0755);
  return dir;
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void read_vocab_vectors(const std::string& path, std::vector<std::string>& inputs,
                        std::vector<std::vector<int32_t>>& expected) {
  const std::string inp = read_text(path + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  for (size_t pos = 0;;) {
    const size_t next = inp.find(sep, pos);
    if (next == std::string::npos) break;
    inputs.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  const std::string out = read_text(path + ".out");
  for (size_t start = 0; start < out.size();) {
    size_t nl = out.find('\n', start);
    if (nl == std::string::npos) nl = out.size();
    const std::string line = out.substr(start, nl - start);
    std::vector<int32_t> ids;
    const char* p = line.c_str();
    char* end = nullptr;
    for (long x = std::strtol(p, &end, 10); end != p; x = std::strtol(p, &end, 10)) {
      ids.push_back(static_cast<int32_t>(x));
      p = end;
    }
    expected.push_back(ids);
    start = nl + 1;
  }
}

}  // namespace infer_test
