#include "core/mmap.h"

#include <algorithm>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace infer {

std::unique_ptr<MappedFile> MappedFile::open(const std::string& path, bool use_mmap) {
  // O_NONBLOCK: open() of a FIFO would otherwise block until a writer comes;
  // the fstat below rejects it (and devices, directories) before any read.
  // Regular files ignore the flag.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) raise(Status::Io, "cannot open '%s': %s", path.c_str(), std::strerror(errno));
  struct stat st{};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    raise(Status::Io, "'%s' is not a regular file", path.c_str());
  }
  std::unique_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ == 0) {
    ::close(fd);
    return f;
  }
  if (use_mmap) {
    void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p != MAP_FAILED) {
      f->fd_ = fd;  // kept for check_intact()
      f->data_ = static_cast<const uint8_t*>(p);
      f->mapped_ = true;
      return f;
    }
  }
  try {
    f->owned_.resize(f->size_);
  } catch (const std::bad_alloc&) {
    ::close(fd);
    raise(Status::OutOfMemory, "cannot allocate %zu bytes to read '%s'", f->size_, path.c_str());
  }
  size_t done = 0;
  while (done < f->size_) {
    ssize_t n = ::read(fd, f->owned_.data() + done, f->size_ - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      raise(Status::Io, "cannot read '%s'", path.c_str());
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  f->data_ = f->owned_.data();
  return f;
}

std::unique_ptr<MappedFile> MappedFile::borrow(const void* data, size_t size) {
  std::unique_ptr<MappedFile> f(new MappedFile());
  f->data_ = static_cast<const uint8_t*>(data);
  f->size_ = size;
  return f;
}

std::unique_ptr<MappedFile> MappedFile::own(std::vector<uint8_t> bytes) {
  std::unique_ptr<MappedFile> f(new MappedFile());
  f->owned_ = std::move(bytes);
  f->data_ = f->owned_.data();
  f->size_ = f->owned_.size();
  return f;
}

MappedFile::~MappedFile() {
  if (mapped_) ::munmap(const_cast<uint8_t*>(data_), size_);
  if (fd_ >= 0) ::close(fd_);
}

void MappedFile::release(const void* p, size_t n) const {
  if (!mapped_ || n == 0 || !contains(p)) return;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t lo = reinterpret_cast<uintptr_t>(p), hi = std::min(lo + n, reinterpret_cast<uintptr_t>(data_) + size_);
  const uintptr_t a = (lo + page - 1) / page * page, b = hi / page * page;
  // A private read-only file mapping: dropping its pages loses nothing.
  if (b > a) ::madvise(reinterpret_cast<void*>(a), b - a, MADV_DONTNEED);
}

void MappedFile::advise_random(const void* p, size_t n) const {
  if (!mapped_ || n == 0 || !contains(p)) return;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t lo = reinterpret_cast<uintptr_t>(p) / page * page;
  const uintptr_t hi = std::min(reinterpret_cast<uintptr_t>(p) + n, reinterpret_cast<uintptr_t>(data_) + size_);
  ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_RANDOM);
}

void MappedFile::check_intact() const {
  if (fd_ < 0) return;
  struct stat st{};
  if (::fstat(fd_, &st) != 0)
    raise(Status::Io, "cannot stat the mapped file '%s': %s", path_.c_str(), std::strerror(errno));
  if (static_cast<uint64_t>(st.st_size) < size_)
    raise(Status::Io, "the model file '%s' was truncated on disk while in use (%lld bytes, %zu mapped): reload it",
          path_.c_str(), static_cast<long long>(st.st_size), size_);
}

}  // namespace infer
