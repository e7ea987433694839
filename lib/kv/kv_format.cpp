#include "kv/kv_format.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace infer {

const char* kv_type_name(KvType t) {
  static const char* const kNames[] = {"f32", "f16", "int8"};  // by KvType value
  const int i = static_cast<int>(t);
  return i >= 0 && i < 3 ? kNames[i] : "?";
}

// ---- host memory ----

HostKvMemory::HostKvMemory(const KvLayout& layout, int n_blocks) : KvMemory(layout, n_blocks) {
  if (n_blocks < 0) raise(Status::InvalidArgument, "a KV pool of %d blocks", n_blocks);
  block_bytes_ = layout.block_elems() * layout.elem_bytes();
  const size_t n_units = static_cast<size_t>(layout.n_layers) * n_blocks * 2;
  const size_t bytes = n_units * block_bytes_;
  const size_t n_scales = n_units * layout.block_scales();
  void* p = nullptr;
  if (posix_memalign(&p, 64, std::max<size_t>(bytes, 64)) != 0)
    raise(Status::OutOfMemory, "cannot allocate %zu bytes for the KV cache", bytes);
  base_ = static_cast<uint8_t*>(p);
  if (n_scales > 0) {
    scales_ = static_cast<float*>(std::calloc(n_scales, sizeof(float)));
    if (!scales_) {
      std::free(base_);
      raise(Status::OutOfMemory, "cannot allocate the KV cache scales");
    }
  }
  if (layout.state_bytes() > 0) {
    const size_t sb = layout.state_bytes() * static_cast<size_t>(n_blocks);
    void* sp = nullptr;
    if (posix_memalign(&sp, 64, std::max<size_t>(sb, 64)) != 0) {
      std::free(base_);
      std::free(scales_);
      raise(Status::OutOfMemory, "cannot allocate %zu bytes for the recurrent state", sb);
    }
    state_ = static_cast<float*>(sp);
  }
  if (layout.type == KvType::I8) {
    const size_t n_off = static_cast<size_t>(layout.n_layers) * n_blocks * layout.n_kv_heads;
    offsets_ = static_cast<int8_t*>(std::calloc(std::max<size_t>(n_off * layout.head_dim, 1), 1));
    offset_scales_ = static_cast<float*>(std::calloc(std::max<size_t>(n_off, 1), sizeof(float)));
    if (!offsets_ || !offset_scales_) {
      std::free(base_);
      std::free(scales_);
      std::free(offsets_);
      std::free(offset_scales_);
      std::free(state_);
      raise(Status::OutOfMemory, "cannot allocate the KV cache offsets");
    }
  }
}

HostKvMemory::~HostKvMemory() {
  std::free(base_);
  std::free(scales_);
  std::free(offsets_);
  std::free(offset_scales_);
  std::free(state_);
}

void HostKvMemory::copy_block(int dst_block, const KvMemory& src_mem, int src_block) {
  const HostKvMemory& src = as_host_memory(src_mem);
  const KvLayout& a = layout_;
  const KvLayout& b = src.layout();
  if (a.n_layers != b.n_layers || a.n_kv_heads != b.n_kv_heads || a.head_dim != b.head_dim ||
      a.block_size != b.block_size || a.type != b.type || a.n_ssm_layers != b.n_ssm_layers ||
      a.ssm_conv_elems != b.ssm_conv_elems || a.ssm_state_elems != b.ssm_state_elems)
    raise(Status::Internal, "KV block copy between pools of different layouts");
  if (dst_block < 0 || dst_block >= n_blocks_ || src_block < 0 || src_block >= src.n_blocks())
    raise(Status::Internal, "KV block copy %d -> %d out of range", src_block, dst_block);
  for (int l = 0; l < a.n_layers; ++l) {
    std::memcpy(k(l, dst_block), src.k(l, src_block), block_bytes_);
    std::memcpy(v(l, dst_block), src.v(l, src_block), block_bytes_);
    if (a.block_scales()) {
      std::memcpy(k_scale(l, dst_block), src.k_scale(l, src_block), a.block_scales() * sizeof(float));
      std::memcpy(v_scale(l, dst_block), src.v_scale(l, src_block), a.block_scales() * sizeof(float));
    }
    if (offsets_) {
      std::memcpy(k_offset(l, dst_block), src.k_offset(l, src_block), static_cast<size_t>(a.n_kv_heads) * a.head_dim);
      std::memcpy(k_offset_scale(l, dst_block), src.k_offset_scale(l, src_block), a.n_kv_heads * sizeof(float));
    }
  }
  if (a.state_bytes() > 0) std::memcpy(ssm_state(0, dst_block), src.ssm_state(0, src_block), a.state_bytes());
}

void HostKvMemory::touch(int n) {
  n = std::min(n, n_blocks_);
  for (int l = 0; l < layout_.n_layers; ++l)
    for (int b = 0; b < n; ++b) {
      std::memset(k(l, b), 0, block_bytes_);
      std::memset(v(l, b), 0, block_bytes_);
    }
  if (layout_.state_bytes() > 0) std::memset(state_, 0, layout_.state_bytes() * static_cast<size_t>(n));
}

std::unique_ptr<KvMemory> make_host_kv_memory(const KvLayout& layout, int n_blocks, KvTier) {
  return std::make_unique<HostKvMemory>(layout, n_blocks);
}

HostKvMemory& as_host_memory(KvMemory& m) {
  auto* h = dynamic_cast<HostKvMemory*>(&m);
  if (!h) raise(Status::Internal, "the KV memory is not host memory (another backend's pool)");
  return *h;
}

const HostKvMemory& as_host_memory(const KvMemory& m) {
  const auto* h = dynamic_cast<const HostKvMemory*>(&m);
  if (!h) raise(Status::Internal, "the KV memory is not host memory (another backend's pool)");
  return *h;
}

// ---- the reference element formats ----
namespace kvfmt {

namespace {
bool is_pow2(int n) { return n > 0 && (n & (n - 1)) == 0; }
}  // namespace

bool rotates(KvType type, int hd) { return type == KvType::I8 && is_pow2(hd) && hd <= 1024; }

void hadamard(float* x, int n) {
  for (int len = 1; len < n; len <<= 1)
    for (int i = 0; i < n; i += len << 1)
      for (int j = i; j < i + len; ++j) {
        const float a = x[j], b = x[j + len];
        x[j] = a + b;
        x[j + len] = a - b;
      }
  const float norm = 1.0f / std::sqrt(static_cast<float>(n));
  for (int i = 0; i < n; ++i) x[i] *= norm;
}

uint16_t fp16_up(float x) {
  uint16_t h = f32_to_fp16(x);
  if (fp16_to_f32(h) < x && h < 0x7bffu) ++h;
  return h;
}

void encode_v_i8(const float* x, int hd, int8_t* q, float* scale) {
  float amax = 0.0f;
  for (int d = 0; d < hd; ++d) amax = std::max(amax, std::fabs(x[d]));
  const float s = amax / 127.0f;
  const float inv = s > 0.0f ? 1.0f / s : 0.0f;
  for (int d = 0; d < hd; ++d) q[d] = static_cast<int8_t>(std::lrintf(x[d] * inv));
  *scale = s;
}

void encode_k_i8(const float* x, const float* c, int hd, int8_t* q, uint16_t* sz) {
  float y[1024];
  float lo = INFINITY, hi = -INFINITY;
  for (int d = 0; d < hd; ++d) {
    y[d] = x[d] - c[d];
    lo = std::min(lo, y[d]);
    hi = std::max(hi, y[d]);
  }
  const uint16_t z16 = f32_to_fp16(0.5f * (lo + hi));
  const float z = fp16_to_f32(z16);
  const float need = std::max((hi - z) / 127.0f, (z - lo) / 128.0f);
  const uint16_t s16 = need > 0.0f ? fp16_up(need) : 0;
  const float s = fp16_to_f32(s16);
  const float inv = s > 0.0f ? 1.0f / s : 0.0f;
  for (int d = 0; d < hd; ++d) q[d] = static_cast<int8_t>(std::clamp(std::lrintf((y[d] - z) * inv), -128L, 127L));
  sz[0] = s16;
  sz[1] = z16;
}

void k_offset(const HostKvMemory& m, int layer, int block, int h, float* c) {
  const int hd = m.layout().head_dim;
  const int8_t* o = m.k_offset(layer, block) + static_cast<size_t>(h) * hd;
  const float s = m.k_offset_scale(layer, block)[h];
  for (int d = 0; d < hd; ++d) c[d] = s * static_cast<float>(o[d]);
}

void set_k_offset(HostKvMemory& m, int layer, int block, int prev) {
  const KvLayout& L = m.layout();
  const int hd = L.head_dim, bs = L.block_size;
  float c[1024], row[1024];
  double sum[1024];
  for (int h = 0; h < L.n_kv_heads; ++h) {
    int8_t* o = m.k_offset(layer, block) + static_cast<size_t>(h) * hd;
    float& os = m.k_offset_scale(layer, block)[h];
    if (prev < 0) {
      std::memset(o, 0, hd);
      os = 0.0f;
      continue;
    }
    k_offset(m, layer, prev, h, c);
    std::fill(sum, sum + hd, 0.0);
    const int8_t* q = static_cast<const int8_t*>(m.k(layer, prev)) + static_cast<size_t>(h) * bs * hd;
    const uint16_t* sz = m.k_scale_zero(layer, prev) + static_cast<size_t>(h) * bs * 2;
    for (int r = 0; r < bs; ++r) {
      decode_k_i8(q + static_cast<size_t>(r) * hd, sz + 2 * r, c, hd, row);
      for (int d = 0; d < hd; ++d) sum[d] += row[d];
    }
    float amax = 0.0f;
    for (int d = 0; d < hd; ++d) {
      row[d] = static_cast<float>(sum[d] / bs);
      amax = std::max(amax, std::fabs(row[d]));
    }
    os = amax / 127.0f;
    const float inv = os > 0.0f ? 1.0f / os : 0.0f;
    for (int d = 0; d < hd; ++d) o[d] = static_cast<int8_t>(std::lrintf(row[d] * inv));
  }
}

void write_token(HostKvMemory& m, int layer, const int32_t* table, int pos, const float* k, const float* v) {
  const KvLayout& L = m.layout();
  const int hd = L.head_dim, bs = L.block_size;
  const int blk = table[pos / bs], off = pos % bs;
  const bool rot = rotates(L.type, hd);
  if (L.type == KvType::I8 && off == 0) set_k_offset(m, layer, blk, pos >= bs ? table[pos / bs - 1] : -1);
  float buf[1024], c[1024];
  for (int h = 0; h < L.n_kv_heads; ++h) {
    const size_t row = static_cast<size_t>(h) * bs + off;
    const float* kh = k + static_cast<size_t>(h) * hd;
    const float* vh = v + static_cast<size_t>(h) * hd;
    switch (L.type) {
      case KvType::F32:
        std::memcpy(static_cast<float*>(m.k(layer, blk)) + row * hd, kh, sizeof(float) * hd);
        std::memcpy(static_cast<float*>(m.v(layer, blk)) + row * hd, vh, sizeof(float) * hd);
        break;
      case KvType::F16:
        for (int d = 0; d < hd; ++d) {
          static_cast<uint16_t*>(m.k(layer, blk))[row * hd + d] = f32_to_fp16(kh[d]);
          static_cast<uint16_t*>(m.v(layer, blk))[row * hd + d] = f32_to_fp16(vh[d]);
        }
        break;
      case KvType::I8:
        std::memcpy(buf, vh, sizeof(float) * hd);
        if (rot) hadamard(buf, hd);
        encode_v_i8(buf, hd, static_cast<int8_t*>(m.v(layer, blk)) + row * hd, m.v_scale(layer, blk) + row);
        std::memcpy(buf, kh, sizeof(float) * hd);
        if (rot) hadamard(buf, hd);
        k_offset(m, layer, blk, h, c);
        encode_k_i8(buf, c, hd, static_cast<int8_t*>(m.k(layer, blk)) + row * hd, m.k_scale_zero(layer, blk) + 2 * row);
        break;
    }
  }
}

void read_row(const HostKvMemory& m, int layer, int block, bool is_v, int h, int off, float* out) {
  const KvLayout& L = m.layout();
  const int hd = L.head_dim;
  const size_t row = static_cast<size_t>(h) * L.block_size + off;
  const void* base = is_v ? m.v(layer, block) : m.k(layer, block);
  switch (L.type) {
    case KvType::F32:
      std::memcpy(out, static_cast<const float*>(base) + row * hd, sizeof(float) * hd);
      return;
    case KvType::F16:
      for (int d = 0; d < hd; ++d) out[d] = fp16_to_f32(static_cast<const uint16_t*>(base)[row * hd + d]);
      return;
    case KvType::I8: {
      const int8_t* q = static_cast<const int8_t*>(base) + row * hd;
      if (is_v) {
        const float s = m.v_scale(layer, block)[row];
        for (int d = 0; d < hd; ++d) out[d] = s * static_cast<float>(q[d]);
        return;
      }
      float c[1024];
      k_offset(m, layer, block, h, c);
      decode_k_i8(q, m.k_scale_zero(layer, block) + 2 * row, c, hd, out);
      return;
    }
  }
}

}  // namespace kvfmt
}  // namespace infer
