#include "gguf/gguf_stream.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace infer {

GgufStreamWriter::GgufStreamWriter(std::string path) : path_(std::move(path)) {
  tmp_ = strformat("%s.tmp.%d", path_.c_str(), static_cast<int>(::getpid()));
}

GgufStreamWriter::~GgufStreamWriter() {
  if (f_) std::fclose(f_);
  if (begun_ && !done_) std::remove(tmp_.c_str());
}

void GgufStreamWriter::set(const std::string& key, GgufValue value) {
  if (begun_) raise(Status::InvalidArgument, "GGUF stream: metadata after begin()");
  if (key == "general.alignment") {
    const uint64_t a = static_cast<uint64_t>(value.as_int());
    if (a == 0 || (a & (a - 1))) raise(Status::InvalidArgument, "general.alignment must be a power of two");
    alignment_ = a;
  }
  meta_.set(key, std::move(value));
}

void GgufStreamWriter::add_tensor(const std::string& name, const std::vector<int64_t>& dims, DType type) {
  if (begun_) raise(Status::InvalidArgument, "GGUF stream: tensor declared after begin()");
  const DTypeInfo* info = dtype_info(type);
  if (!info || dims.empty() || dims.size() > 4)
    raise(Status::InvalidArgument, "GGUF stream: tensor '%s' has a bad type or shape", name.c_str());
  int64_t n = 1;
  for (int64_t d : dims)
    if (d < 1 || __builtin_mul_overflow(n, d, &n))
      raise(Status::InvalidArgument, "GGUF stream: tensor '%s' has a bad dimension", name.c_str());
  if (dims[0] % info->block != 0)
    raise(Status::InvalidArgument, "GGUF stream: tensor '%s': row length %lld is not a multiple of the %s block %u",
          name.c_str(), (long long)dims[0], info->name, info->block);
  for (const Tensor& t : tensors_)
    if (t.name == name) raise(Status::InvalidArgument, "GGUF stream: duplicate tensor '%s'", name.c_str());
  tensors_.push_back({name, dims, type, static_cast<uint64_t>(n / info->block) * info->bytes});
}

void GgufStreamWriter::put(const void* p, size_t n) {
  if (n && std::fwrite(p, 1, n, f_) != n)
    raise(Status::Io, "cannot write '%s': %s", tmp_.c_str(), std::strerror(errno));
  pos_ += n;
}

void GgufStreamWriter::pad() {
  static const uint8_t zeros[64] = {};
  uint64_t left = (alignment_ - pos_ % alignment_) % alignment_;
  while (left > 0) {
    const size_t k = static_cast<size_t>(std::min<uint64_t>(left, sizeof zeros));
    put(zeros, k);
    left -= k;
  }
}

void GgufStreamWriter::begin() {
  if (begun_) raise(Status::InvalidArgument, "GGUF stream: begin() twice");
  // Metadata through GgufWriter (a header without tensors ends right after
  // the key/values); then the tensor count is patched in and the infos added.
  std::vector<uint8_t> head = meta_.to_bytes();
  const uint64_t count = tensors_.size();
  std::memcpy(head.data() + 8, &count, 8);
  auto put_u32 = [&](uint32_t v) { head.insert(head.end(), reinterpret_cast<uint8_t*>(&v), reinterpret_cast<uint8_t*>(&v) + 4); };
  auto put_u64 = [&](uint64_t v) { head.insert(head.end(), reinterpret_cast<uint8_t*>(&v), reinterpret_cast<uint8_t*>(&v) + 8); };
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    put_u64(t.name.size());
    head.insert(head.end(), t.name.begin(), t.name.end());
    put_u32(static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) put_u64(static_cast<uint64_t>(d));
    put_u32(static_cast<uint32_t>(t.type));
    put_u64(offset);
    offset = (offset + t.nbytes + alignment_ - 1) / alignment_ * alignment_;
  }
  f_ = std::fopen(tmp_.c_str(), "wb");
  if (!f_) raise(Status::Io, "cannot create '%s': %s", tmp_.c_str(), std::strerror(errno));
  begun_ = true;
  put(head.data(), head.size());
  pad();
  cur_ = 0;
  written_ = 0;
  while (cur_ < tensors_.size() && tensors_[cur_].nbytes == 0) ++cur_;
}

void GgufStreamWriter::write(const void* data, size_t n) {
  if (!begun_ || done_) raise(Status::InvalidArgument, "GGUF stream: write outside begin()/finish()");
  if (cur_ >= tensors_.size() || written_ + n > tensors_[cur_].nbytes)
    raise(Status::Internal, "GGUF stream: write of %zu bytes runs past tensor '%s'", n,
          cur_ < tensors_.size() ? tensors_[cur_].name.c_str() : "(end)");
  put(data, n);
  written_ += n;
  if (written_ == tensors_[cur_].nbytes) {
    pad();
    ++cur_;
    written_ = 0;
  }
}

void GgufStreamWriter::finish() {
  if (!begun_) begin();
  if (cur_ != tensors_.size())
    raise(Status::Internal, "GGUF stream: tensor '%s' was not fully written", tensors_[cur_].name.c_str());
  std::FILE* f = f_;
  f_ = nullptr;
  if (std::fclose(f) != 0) raise(Status::Io, "cannot write '%s': %s", tmp_.c_str(), std::strerror(errno));
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp_.c_str());
    raise(Status::Io, "cannot rename '%s' to '%s': %s", tmp_.c_str(), path_.c_str(), std::strerror(e));
  }
  done_ = true;
}

}  // namespace infer
