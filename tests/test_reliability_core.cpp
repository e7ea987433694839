// Reliability of the core pieces under resource exhaustion and malformed
// data (../shared/repro findings): the thread pool when threads cannot
// start, per-thread scratch that must never abort, available memory, and
// models whose weights or metadata are not finite.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <regex>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/fault.h"
#include "core/sysmem.h"
#include "core/threadpool.h"
#include "gguf/gguf.h"
#include "infer/infer.h"
#include "model/model.h"
#include "tools/llama2c.h"
#include "test_util.h"

using namespace infer;

// #6: a thread that could not start unwound the pool's constructor with
// joinable threads (std::terminate: "terminate called...") or with workers
// waiting on a condition variable being destroyed (a hang).
TEST_CASE("reliability: a thread pool whose threads cannot all start reports OUT_OF_MEMORY", "[reliability]") {
  for (int64_t nth : {1, 2, 5}) {
    INFO(nth);
    fault::arm("threadpool.thread", nth);
    try {
      ThreadPool pool(8);
      FAIL("the pool started although a thread could not");
    } catch (const Error& e) {
      CHECK(e.status() == Status::OutOfMemory);
      CHECK(std::string(e.what()).find("n_threads") != std::string::npos);
    }
    fault::disarm();
  }
  // The C API says so too.
  REQUIRE_SHARED(path, "models/stories260K.gguf");
  infer_model* m = nullptr;
  REQUIRE(infer_model_load(path.c_str(), nullptr, &m) == INFER_OK);
  infer_engine_params ep;
  infer_engine_params_init(&ep);
  ep.n_threads = 6;
  infer_engine* e = nullptr;
  fault::arm("threadpool.thread", 3);
  CHECK(infer_engine_create(m, &ep, &e) == INFER_ERR_OUT_OF_MEMORY);
  fault::disarm();
  CHECK(e == nullptr);
  REQUIRE(infer_engine_create(m, &ep, &e) == INFER_OK);  // and nothing is left broken
  infer_engine_free(e);
  infer_model_free(m);
  CHECK_THROWS_AS(ThreadPool(ThreadPool::kMaxThreads + 1), Error);
}

// #8: a thread_local object with a destructor makes the C++ runtime register
// that destructor (allocating) on a thread's first use, and abort the host
// when the allocation fails ("failed to register TLS destructor"). Library
// code keeps thread_local pointers and trivially destructible values only
// (core/tls.h); this scan is the test that would catch a new one.
TEST_CASE("reliability: no thread_local with a destructor in the library", "[reliability]") {
  const std::filesystem::path root = INFER_SOURCE_DIR;
  const std::regex decl(R"(\bthread_local\s+([^;=(]*?)\s*[;=({])");
  const std::regex ok(R"(^(static\s+)?(const\s+)?(bool|char|int|unsigned|long|float|double|size_t|u?int(8|16|32|64)_t)\b.*|.*\*\s*[A-Za-z_][A-Za-z_0-9]*(\s*,\s*\*\s*[A-Za-z_][A-Za-z_0-9]*)*\s*$)");
  int files = 0;
  for (const char* dir : {"lib", "cpu"}) {
    for (const auto& entry : std::filesystem::recursive_directory_iterator(root / dir)) {
      const std::string ext = entry.path().extension().string();
      if (ext != ".cpp" && ext != ".h" && ext != ".cu") continue;
      ++files;
      std::ifstream in(entry.path());
      int line_no = 0;
      for (std::string line; std::getline(in, line);) {
        ++line_no;
        const size_t comment = line.find("//");
        const std::string code = comment == std::string::npos ? line : line.substr(0, comment);
        std::smatch mt;
        if (!std::regex_search(code, mt, decl)) continue;
        std::string what = mt[1].str();
        // "thread_local char name[N]" (a fixed array of a trivial type) is fine too.
        INFO(entry.path().string() << ":" << line_no << ": " << line);
        CHECK(std::regex_match(what, ok));
      }
    }
  }
  CHECK(files > 10);
}

// #14
TEST_CASE("reliability: available_memory_bytes reads MemAvailable and cgroup v1/v2 limits", "[reliability]") {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(infer_test::temp_dir()) / "sysmem";
  fs::remove_all(root);
  auto put = [](const fs::path& p, const std::string& text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  };
  const fs::path proc = root / "proc", sys = root / "sys";
  put(proc / "meminfo", "MemTotal:       32000000 kB\nMemFree:  100 kB\nMemAvailable:   2000000 kB\n");
  // No cgroup information: MemAvailable.
  CHECK(available_memory_bytes(proc.string(), sys.string()) == 2000000ull * 1024);
  // cgroup v2, limit on the parent: 512 MiB - (300 MiB - 100 MiB inactive file) = 312 MiB.
  put(proc / "self" / "cgroup", "0::/app/job\n");
  put(sys / "fs/cgroup/app/job/memory.max", "max\n");
  put(sys / "fs/cgroup/app/memory.max", std::to_string(512ull << 20) + "\n");
  put(sys / "fs/cgroup/app/memory.current", std::to_string(300ull << 20) + "\n");
  put(sys / "fs/cgroup/app/memory.stat", "anon 1\ninactive_file " + std::to_string(100ull << 20) + "\n");
  CHECK(available_memory_bytes(proc.string(), sys.string()) == (312ull << 20));
  // Usage above the limit: nothing left.
  put(sys / "fs/cgroup/app/memory.current", std::to_string(900ull << 20) + "\n");
  CHECK(available_memory_bytes(proc.string(), sys.string()) == 0);
  // cgroup v1 with the limit at the mount's root (a container).
  put(proc / "self" / "cgroup", "5:cpu:/\n4:memory:/docker/abc\n0::/\n");
  put(sys / "fs/cgroup/memory/memory.limit_in_bytes", std::to_string(1ull << 30) + "\n");
  put(sys / "fs/cgroup/memory/memory.usage_in_bytes", std::to_string(256ull << 20) + "\n");
  put(sys / "fs/cgroup/memory/memory.stat", "total_inactive_file 0\n");
  CHECK(available_memory_bytes(proc.string(), sys.string()) == (768ull << 20));
  // v1's "no limit" (about 2^63) is no limit.
  put(sys / "fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  CHECK(available_memory_bytes(proc.string(), sys.string()) == 2000000ull * 1024);
  // Nothing readable at all.
  CHECK(available_memory_bytes((root / "none").string(), (root / "none").string()) == UINT64_MAX);
  // The real one is something.
  CHECK(available_memory_bytes() > 0);
}

namespace {

// Rewrites a GGUF, letting `edit_meta` change metadata and `edit_tensor`
// change each tensor's bytes.
void rewrite_gguf(const std::string& in, const std::string& out, const std::function<void(GgufWriter&)>& edit_meta,
                  const std::function<void(const GgufTensorInfo&, std::vector<uint8_t>&)>& edit_tensor) {
  auto g = GgufFile::open(in, false);
  GgufWriter w;
  for (const auto& [k, v] : g->metadata()) w.set(k, v);
  if (edit_meta) edit_meta(w);
  for (const GgufTensorInfo& t : g->tensors()) {
    std::vector<uint8_t> bytes(g->tensor_data(t), g->tensor_data(t) + t.nbytes);
    if (edit_tensor) edit_tensor(t, bytes);
    w.add_tensor(t.name, t.dims, t.type, bytes.data(), bytes.size());
  }
  w.write(out);
}

}  // namespace

// #18: NaN/Inf weights surfaced as every request failing INTERNAL ("logits
// contain NaN") instead of a FORMAT error at load naming the tensor.
TEST_CASE("reliability: NaN or Inf weights are a FORMAT error at load naming the tensor", "[reliability]") {
  REQUIRE_SHARED(path, "models/stories260K.gguf");
  const std::string dir = infer_test::temp_dir();
  std::string victim;
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()}) {
    const std::string out = dir + "/nan_weights.gguf";
    rewrite_gguf(path, out, nullptr, [&](const GgufTensorInfo& t, std::vector<uint8_t>& b) {
      if (t.type == DType::F32 && t.name.find("ffn_down") != std::string::npos && victim.empty()) victim = t.name;
      if (t.name == victim) std::memcpy(b.data() + b.size() / 2 / 4 * 4, &bad, 4);
    });
    REQUIRE(!victim.empty());
    for (int mmap : {0, 1}) {
      infer_model_params mp;
      infer_model_params_init(&mp);
      mp.use_mmap = mmap;
      infer_model* m = nullptr;
      CHECK(infer_model_load(out.c_str(), &mp, &m) == INFER_ERR_FORMAT);
      CHECK(std::string(infer_last_error()).find(victim) != std::string::npos);
      infer_model_free(m);
      // vocab_only loads do not look at weights.
      mp.vocab_only = 1;
      CHECK(infer_model_load(out.c_str(), &mp, &m) == INFER_OK);
      infer_model_free(m);
    }
  }
  // A block scale of a quantized tensor.
  const std::string q = dir + "/nan_q8.gguf";
  infer_quantize_params qp;
  infer_quantize_params_init(&qp);
  qp.type = "q8_0";
  qp.n_threads = 1;
  REQUIRE(infer_quantize(path.c_str(), q.c_str(), &qp, nullptr) == INFER_OK);
  infer_model* m = nullptr;
  REQUIRE(infer_model_load(q.c_str(), nullptr, &m) == INFER_OK);  // the clean one loads
  infer_model_free(m);
  std::string qvictim;
  rewrite_gguf(q, dir + "/nan_q8_bad.gguf", nullptr, [&](const GgufTensorInfo& t, std::vector<uint8_t>& b) {
    if (t.type == DType::Q8_0 && qvictim.empty()) {
      qvictim = t.name;
      const uint16_t inf16 = 0x7c00;
      std::memcpy(b.data() + 34 * 3, &inf16, 2);  // block 3's scale
    }
  });
  REQUIRE(!qvictim.empty());
  CHECK(infer_model_load((dir + "/nan_q8_bad.gguf").c_str(), nullptr, &m) == INFER_ERR_FORMAT);
  CHECK(std::string(infer_last_error()).find(qvictim) != std::string::npos);
}

// #20: rope "linear" scaling with factor 0 was reported as "'linear' not supported".
TEST_CASE("reliability: a non-positive rope scaling factor is named as such", "[reliability]") {
  REQUIRE_SHARED(path, "models/stories260K.gguf");
  const std::string out = infer_test::temp_dir() + "/rope0.gguf";
  for (const float factor : {0.0f, -2.0f, std::numeric_limits<float>::quiet_NaN()}) {
    rewrite_gguf(path, out, [&](GgufWriter& w) {
      w.set("llama.rope.scaling.type", GgufValue::make_string("linear"));
      w.set("llama.rope.scaling.factor", GgufValue::make_f32(factor));
    }, nullptr);
    infer_model* m = nullptr;
    CHECK(infer_model_load(out.c_str(), nullptr, &m) == INFER_ERR_FORMAT);
    CHECK(std::string(infer_last_error()).find("factor") != std::string::npos);
    infer_model_free(m);
  }
}

// #20: the llama2.c converter accepted a NaN token score and wrote a GGUF its
// own loader rejects.
TEST_CASE("reliability: the llama2.c converter rejects a non-finite token score", "[reliability]") {
  REQUIRE_SHARED(ckpt, "models/stories260K.bin");
  REQUIRE_SHARED(tok, "models/tok512.bin");
  std::vector<uint8_t> bytes = infer_test::read_file(tok);
  REQUIRE(bytes.size() > 16);
  const std::string dir = infer_test::temp_dir();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(bytes.data() + 4, &nan, 4);  // token 0's score
  const std::string bad_tok = dir + "/tok_nan.bin";
  std::ofstream(bad_tok, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                  static_cast<std::streamsize>(bytes.size()));
  const std::string out = dir + "/nan_score.gguf";
  std::filesystem::remove(out);
  CHECK(infer_convert_llama2c(ckpt.c_str(), bad_tok.c_str(), out.c_str()) == INFER_ERR_FORMAT);
  CHECK(std::string(infer_last_error()).find("score") != std::string::npos);
  CHECK(!std::filesystem::exists(out));
}

// CTest (catch_discover_tests) splits a test name at ';': both halves then
// name no test case, and ctest reports them passed without running anything.
TEST_CASE("reliability: no test case name holds a semicolon (ctest would not run it)", "[reliability]") {
  const std::filesystem::path root = INFER_SOURCE_DIR;
  const std::regex name(R"re(TEST_CASE\(\s*"([^"]*)")re");
  int cases = 0;
  for (const auto& entry : std::filesystem::directory_iterator(root / "tests")) {
    if (entry.path().extension() != ".cpp") continue;
    std::ifstream in(entry.path());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (std::sregex_iterator it(text.begin(), text.end(), name), end; it != end; ++it) {
      ++cases;
      INFO(entry.path().filename().string() << ": " << (*it)[1].str());
      CHECK((*it)[1].str().find(';') == std::string::npos);
    }
  }
  CHECK(cases > 100);
}
