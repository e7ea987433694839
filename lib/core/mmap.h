// A read-only view of a whole file: mmapped where possible, read into memory
// otherwise (or when the caller asks for no mmap).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace infer {

class MappedFile {
 public:
  // Throws Error(Io) when the file cannot be opened or read.
  static std::unique_ptr<MappedFile> open(const std::string& path, bool use_mmap = true);
  // Wraps caller memory without copying (the caller keeps it alive).
  static std::unique_ptr<MappedFile> borrow(const void* data, size_t size);
  // Takes ownership of a buffer.
  static std::unique_ptr<MappedFile> own(std::vector<uint8_t> bytes);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
  std::vector<uint8_t> owned_;
  std::string path_;
};

}  // namespace infer
