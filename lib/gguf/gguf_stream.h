// A GGUF writer that streams tensor data to disk as it is produced, so files
// far larger than memory (a 7B/8B model) can be written: metadata and every
// tensor's name, shape and type are declared first, the header goes out at
// begin(), then tensor bytes follow in declaration order, each tensor padded
// to the alignment. The file appears (renamed from a temporary) only when
// finish() succeeds. Metadata is serialized by GgufWriter (gguf/gguf.h).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace infer {

class GgufStreamWriter {
 public:
  explicit GgufStreamWriter(std::string path);
  ~GgufStreamWriter();  // an unfinished file is removed
  GgufStreamWriter(const GgufStreamWriter&) = delete;
  GgufStreamWriter& operator=(const GgufStreamWriter&) = delete;

  void set(const std::string& key, GgufValue value);
  // Declares the next tensor; Error(InvalidArgument) for a bad shape/type.
  void add_tensor(const std::string& name, const std::vector<int64_t>& dims, DType type);
  size_t n_tensors() const { return tensors_.size(); }

  void begin();
  // Appends bytes of the current tensor (tensors complete in order; a write
  // may not run past the end of the current tensor).
  void write(const void* data, size_t n);
  // Index of the tensor the next write goes to.
  size_t current() const { return cur_; }
  void finish();

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> dims;
    DType type;
    uint64_t nbytes;
  };
  void put(const void* p, size_t n);
  void pad();

  std::string path_, tmp_;
  GgufWriter meta_;
  std::vector<Tensor> tensors_;
  uint64_t alignment_ = 32;
  std::FILE* f_ = nullptr;
  uint64_t pos_ = 0;           // bytes written to the file
  size_t cur_ = 0;             // tensor being written
  uint64_t written_ = 0;       // bytes of it written
  bool begun_ = false, done_ = false;
};

}  // namespace infer
