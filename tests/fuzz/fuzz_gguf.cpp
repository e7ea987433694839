// libFuzzer target for the GGUF reader (and writer): any input must either
// parse or fail with infer::Error; anything else (a crash, a sanitizer report,
// another exception) is a bug. A file that parses is also written back and
// re-read, which must give the same metadata and tensor bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "gguf/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<infer::GgufFile> f;
  try {
    f = infer::GgufFile::from_memory(data, size);
  } catch (const infer::Error&) {
    return 0;
  }

  // Touch what a model loader touches, so the sanitizers see every pointer.
  unsigned sum = 0;
  for (const infer::GgufTensorInfo& t : f->tensors()) {
    const uint8_t* p = f->tensor_data(t);
    sum += p[0] + p[t.nbytes - 1];
  }
  for (const auto& kv : f->metadata()) {
    try {
      sum += static_cast<unsigned>(f->get_int(kv.first).value_or(0));
    } catch (const infer::Error&) {
    }
  }

  infer::GgufWriter w(f->version());
  for (const auto& [key, value] : f->metadata()) w.set(key, value);
  for (const infer::GgufTensorInfo& t : f->tensors()) {
    w.add_tensor(t.name, t.dims, t.type, f->tensor_data(t), t.nbytes);
  }
  const std::vector<uint8_t> bytes = w.to_bytes();
  const auto g = infer::GgufFile::from_memory(bytes.data(), bytes.size());
  if (!(g->metadata() == f->metadata()) || g->tensors().size() != f->tensors().size()) std::abort();
  for (size_t i = 0; i < f->tensors().size(); ++i) {
    const infer::GgufTensorInfo& a = f->tensors()[i];
    const infer::GgufTensorInfo& b = g->tensors()[i];
    if (a.name != b.name || a.dims != b.dims || a.type != b.type ||
        std::memcmp(f->tensor_data(a), g->tensor_data(b), a.nbytes) != 0) {
      std::abort();
    }
  }
  static volatile unsigned sink;
  sink = sum;  // keeps the reads above from being optimized away
  return 0;
}
