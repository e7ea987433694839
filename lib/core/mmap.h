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

  // For a mapped file: throws Error(Io) when the file has shrunk below the
  // mapped size (truncated or rewritten in place by another process), where
  // reading the pages past its end would raise SIGBUS. One fstat: cheap
  // enough to call before every forward pass. A file truncated between this
  // check and the reads that follow still faults: the check narrows that
  // window to one forward pass, it cannot close it (only use_mmap = 0, which
  // reads the file into memory, can). No-op for files read into memory.
  void check_intact() const;
  // For a mapped file: gives back the pages wholly inside [p, p + n) (a
  // range of data()), so they stop counting in the process's memory; a
  // later read brings them back from the file. No-op otherwise (memory
  // that was read or borrowed holds the only copy).
  void release(const void* p, size_t n) const;
  // For a mapped file: reads of [p, p + n) fault in only the pages they
  // touch, without the kernel's readahead (a table read by scattered rows).
  void advise_random(const void* p, size_t n) const;
  bool contains(const void* p) const {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    return b >= data_ && b < data_ + size_;
  }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
  int fd_ = -1;  // the mapped file, kept open for check_intact()
  std::vector<uint8_t> owned_;
  std::string path_;
};

}  // namespace infer
