// Round-to-nearest quantizers for the block formats, written from the
// layouts in quant/dequant.cpp (the inverse of each) and core/dtype.h.
#include "quant/formats.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"

namespace infer {

namespace {

// The value an f32 takes once stored as f16.
float f16r(float x) { return fp16_to_f32(f32_to_fp16(x)); }

void put_f16(uint8_t* p, float x) {
  const uint16_t h = f32_to_fp16(x);
  std::memcpy(p, &h, 2);
}

float get_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_f32(h);
}

int clampi(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

int round_int(float x) { return static_cast<int>(std::lround(x)); }

// The value of largest magnitude, with its sign.
float signed_absmax(const float* x, int n) {
  float amax = 0, vmax = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      vmax = x[i];
    }
  }
  return vmax;
}

// ---- INT4_G* dequantization (our format) ---------------------------------------------

template <int G>
void dequant_int4(const uint8_t* b, float* y) {
  const float d = get_f16(b);
  const int z = b[2];
  const uint8_t* qs = b + 4;
  for (int j = 0; j < G / 2; ++j) {
    y[j] = static_cast<float>((qs[j] & 0x0F) - z) * d;
    y[j + G / 2] = static_cast<float>((qs[j] >> 4) - z) * d;
  }
}

int int4_group(DType t) {
  switch (t) {
    case DType::INT4_G32: return 32;
    case DType::INT4_G64: return 64;
    case DType::INT4_G128: return 128;
    default: return 0;
  }
}

// ---- K formats ------------------------------------------------------------------------

// Fits x ≈ s * q - m over one sub-block (q in [0, L], s >= 0, m >= 0) by
// trying a range of scales around the plain min/max one and solving the
// least-squares (s, m) for each rounding; returns the best fit.
void fit_scale_min(const float* x, int n, int L, float* s_out, float* m_out) {
  float xmin = x[0], xmax = x[0];
  for (int i = 1; i < n; ++i) {
    xmin = std::min(xmin, x[i]);
    xmax = std::max(xmax, x[i]);
  }
  xmin = std::min(xmin, 0.0f);
  if (xmax <= xmin) {
    *s_out = 0;
    *m_out = -xmin;
    return;
  }
  float best_s = (xmax - xmin) / static_cast<float>(L), best_c = xmin;
  auto err_of = [&](float s, float c) {
    const float inv = s > 0 ? 1.0f / s : 0.0f;
    float e = 0;
    for (int i = 0; i < n; ++i) {
      const float q = std::min(static_cast<float>(L), std::max(0.0f, std::nearbyint((x[i] - c) * inv)));
      const float d = s * q + c - x[i];
      e += d * d;
    }
    return static_cast<double>(e);
  };
  double best_err = err_of(best_s, best_c);
  int q[256];
  for (int step = -6; step <= 6; ++step) {
    const float iscale = (static_cast<float>(L) + 0.15f * static_cast<float>(step)) / (xmax - xmin);
    double sq = 0, sqq = 0, sx = 0, sqx = 0;
    for (int i = 0; i < n; ++i) {
      q[i] = static_cast<int>(std::min(static_cast<float>(L), std::max(0.0f, std::nearbyint((x[i] - xmin) * iscale))));
      sq += q[i];
      sqq += static_cast<double>(q[i]) * q[i];
      sx += x[i];
      sqx += q[i] * static_cast<double>(x[i]);
    }
    const double det = n * sqq - sq * sq;
    if (det <= 0) continue;
    double s = (n * sqx - sq * sx) / det;
    double c = (sqq * sx - sq * sqx) / det;
    if (c > 0) {  // the offset can only lower values (m >= 0)
      c = 0;
      s = sqq > 0 ? sqx / sqq : 0;
    }
    if (!(s > 0)) continue;
    const double e = err_of(static_cast<float>(s), static_cast<float>(c));
    if (e < best_err) {
      best_err = e;
      best_s = static_cast<float>(s);
      best_c = static_cast<float>(c);
    }
  }
  *s_out = best_s;
  *m_out = -best_c;
}

// The 8 (scale, min) pairs of Q4_K / Q5_K as 6-bit values in 12 bytes (the
// inverse of dequant.cpp's scale_min_k4).
void pack_scale_min_k4(const int* sc, const int* mn, uint8_t* q) {
  std::memset(q, 0, 12);
  for (int j = 0; j < 4; ++j) {
    q[j] = static_cast<uint8_t>(sc[j] & 63);
    q[j + 4] = static_cast<uint8_t>(mn[j] & 63);
  }
  for (int j = 4; j < 8; ++j) {
    q[j + 4] = static_cast<uint8_t>((sc[j] & 0x0F) | ((mn[j] & 0x0F) << 4));
    q[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
    q[j] |= static_cast<uint8_t>((mn[j] >> 4) << 6);
  }
}

// Q4_K (L = 15) and Q5_K (L = 31): the super-block's 8 sub-block fits, their
// scales and mins quantized to 6 bits against f16 d / dmin, then the values
// requantized with the scales actually stored. q receives 256 values.
void quantize_k_superblock(const float* x, int L, float* d_out, float* dmin_out, int* sc, int* mn, int* q) {
  float s[8], m[8];
  float smax = 0, mmax = 0;
  for (int j = 0; j < 8; ++j) {
    fit_scale_min(x + 32 * j, 32, L, &s[j], &m[j]);
    smax = std::max(smax, s[j]);
    mmax = std::max(mmax, m[j]);
  }
  const float d = f16r(smax / 63.0f), dmin = f16r(mmax / 63.0f);
  for (int j = 0; j < 8; ++j) {
    sc[j] = d > 0 ? clampi(round_int(s[j] / d), 0, 63) : 0;
    mn[j] = dmin > 0 ? clampi(round_int(m[j] / dmin), 0, 63) : 0;
    const float ds = d * static_cast<float>(sc[j]), dm = dmin * static_cast<float>(mn[j]);
    for (int i = 0; i < 32; ++i) q[32 * j + i] = ds > 0 ? clampi(round_int((x[32 * j + i] + dm) / ds), 0, L) : 0;
  }
  *d_out = d;
  *dmin_out = dmin;
}

// A Q4_K/Q5_K super-block quantized to levels 0..L: writes its f16 d, f16
// dmin and packed scales (the first 16 bytes of b); q gets the 256 levels.
void quantize_k_head(const float* x, int L, uint8_t* b, int* q) {
  float d, dmin;
  int sc[8], mn[8];
  quantize_k_superblock(x, L, &d, &dmin, sc, mn, q);
  put_f16(b, d);
  put_f16(b + 2, dmin);
  pack_scale_min_k4(sc, mn, b + 4);
}

void quantize_q4_k(const float* x, uint8_t* b) {
  int q[256];
  quantize_k_head(x, 15, b, q);
  uint8_t* qs = b + 16;
  for (int chunk = 0; chunk < 4; ++chunk)
    for (int l = 0; l < 32; ++l)
      qs[32 * chunk + l] = static_cast<uint8_t>(q[64 * chunk + l] | (q[64 * chunk + 32 + l] << 4));
}

void quantize_q5_k(const float* x, uint8_t* b) {
  int q[256];
  quantize_k_head(x, 31, b, q);
  uint8_t* qh = b + 16;
  uint8_t* qs = b + 48;
  std::memset(qh, 0, 32);
  for (int chunk = 0; chunk < 4; ++chunk) {
    for (int l = 0; l < 32; ++l) {
      const int lo = q[64 * chunk + l], hi = q[64 * chunk + 32 + l];
      qs[32 * chunk + l] = static_cast<uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
      qh[l] |= static_cast<uint8_t>(((lo >> 4) & 1) << (2 * chunk));
      qh[l] |= static_cast<uint8_t>(((hi >> 4) & 1) << (2 * chunk + 1));
    }
  }
}

// Q6_K: 16 sub-blocks of 16 with signed int8 scales against one f16 d;
// values q - 32 in [-32, 31].
void quantize_q6_k(const float* x, uint8_t* b) {
  float s[16];
  float smax = 0;
  for (int j = 0; j < 16; ++j) {
    s[j] = signed_absmax(x + 16 * j, 16) / -32.0f;
    if (std::fabs(s[j]) > std::fabs(smax)) smax = s[j];
  }
  const float d = f16r(std::fabs(smax) / 127.0f);
  int8_t sc[16];
  int q[256];
  for (int j = 0; j < 16; ++j) {
    sc[j] = static_cast<int8_t>(d > 0 ? clampi(round_int(s[j] / d), -127, 127) : 0);
    const float ds = d * static_cast<float>(sc[j]);
    for (int i = 0; i < 16; ++i) q[16 * j + i] = ds != 0 ? clampi(round_int(x[16 * j + i] / ds) + 32, 0, 63) : 32;
  }
  uint8_t* ql = b;
  uint8_t* qh = b + 128;
  std::memset(b, 0, 210);
  for (int half = 0; half < 2; ++half) {
    const int* v = q + 128 * half;
    uint8_t* L = ql + 64 * half;
    uint8_t* H = qh + 32 * half;
    for (int l = 0; l < 32; ++l) {
      L[l] = static_cast<uint8_t>((v[l] & 0x0F) | ((v[l + 64] & 0x0F) << 4));
      L[l + 32] = static_cast<uint8_t>((v[l + 32] & 0x0F) | ((v[l + 96] & 0x0F) << 4));
      H[l] = static_cast<uint8_t>((v[l] >> 4) | ((v[l + 32] >> 4) << 2) | ((v[l + 64] >> 4) << 4) |
                                  ((v[l + 96] >> 4) << 6));
    }
  }
  std::memcpy(b + 192, sc, 16);
  put_f16(b + 208, d);
}

}  // namespace

// ---- the affine grids ---------------------------------------------------------------

int Grid::quantize(float x) const {
  if (a == 0) return clampi(0, qmin, qmax);
  return clampi(round_int((x - b) / a), qmin, qmax);
}

bool grid_supported(DType t) {
  switch (t) {
    case DType::Q8_0: case DType::Q4_0: case DType::Q4_1: case DType::Q5_0: case DType::Q5_1:
    case DType::INT4_G32: case DType::INT4_G64: case DType::INT4_G128:
      return true;
    default:
      return false;
  }
}

Grid grid_for_block(DType t, const float* x, float clip) {
  const int n = static_cast<int>(dtype_info(t)->block);
  Grid g;
  switch (t) {
    case DType::Q8_0: {
      float amax = 0;
      for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
      g.a = f16r(amax * clip / 127.0f);
      g.qmin = -127;
      g.qmax = 127;
      return g;
    }
    case DType::Q4_0:
    case DType::Q5_0: {
      const int half = t == DType::Q4_0 ? 8 : 16;
      g.a = f16r(signed_absmax(x, n) * clip / -static_cast<float>(half));
      g.b = -static_cast<float>(half) * g.a;
      g.qmin = 0;
      g.qmax = 2 * half - 1;
      return g;
    }
    case DType::Q4_1:
    case DType::Q5_1: {
      const int L = t == DType::Q4_1 ? 15 : 31;
      float lo = x[0], hi = x[0];
      for (int i = 1; i < n; ++i) {
        lo = std::min(lo, x[i]);
        hi = std::max(hi, x[i]);
      }
      lo *= clip;
      hi *= clip;
      g.a = f16r((hi - lo) / static_cast<float>(L));
      g.b = f16r(lo);
      g.qmin = 0;
      g.qmax = L;
      return g;
    }
    case DType::INT4_G32:
    case DType::INT4_G64:
    case DType::INT4_G128: {
      float lo = 0, hi = 0;  // the range always holds 0 (so it is exact)
      for (int i = 0; i < n; ++i) {
        lo = std::min(lo, x[i]);
        hi = std::max(hi, x[i]);
      }
      lo *= clip;
      hi *= clip;
      g.a = f16r((hi - lo) / 15.0f);
      const int z = g.a > 0 ? clampi(round_int(-lo / g.a), 0, 15) : 0;
      g.b = -static_cast<float>(z) * g.a;
      g.qmin = 0;
      g.qmax = 15;
      return g;
    }
    default:
      raise(Status::Unsupported, "no grid quantizer for %s", dtype_name(t));
  }
}

void encode_block(DType t, const Grid& g, const int* q, uint8_t* out) {
  switch (t) {
    case DType::Q8_0:
      put_f16(out, g.a);
      for (int i = 0; i < 32; ++i) out[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(clampi(q[i], -128, 127)));
      return;
    case DType::Q4_0:
    case DType::Q4_1: {
      put_f16(out, g.a);
      uint8_t* qs = out + 2;
      if (t == DType::Q4_1) {
        put_f16(out + 2, g.b);
        qs = out + 4;
      }
      for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
      return;
    }
    case DType::Q5_0:
    case DType::Q5_1: {
      put_f16(out, g.a);
      uint8_t* p = out + 2;
      if (t == DType::Q5_1) {
        put_f16(out + 2, g.b);
        p = out + 4;
      }
      uint32_t qh = 0;
      for (int j = 0; j < 32; ++j) qh |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
      std::memcpy(p, &qh, 4);
      for (int j = 0; j < 16; ++j) p[4 + j] = static_cast<uint8_t>((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
      return;
    }
    case DType::INT4_G32:
    case DType::INT4_G64:
    case DType::INT4_G128: {
      const int G = int4_group(t);
      put_f16(out, g.a);
      out[2] = static_cast<uint8_t>(g.a != 0 ? clampi(round_int(-g.b / g.a), 0, 15) : 0);
      out[3] = 0;
      for (int j = 0; j < G / 2; ++j)
        out[4 + j] = static_cast<uint8_t>((q[j] & 0x0F) | ((q[j + G / 2] & 0x0F) << 4));
      return;
    }
    default:
      raise(Status::Unsupported, "no grid encoder for %s", dtype_name(t));
  }
}

// ---- rows ------------------------------------------------------------------------------

bool can_quantize(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16: case DType::Q4_K: case DType::Q5_K: case DType::Q6_K:
      return true;
    default:
      return grid_supported(t);
  }
}

void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  const DTypeInfo* info = dtype_info(t);
  if (!info || !can_quantize(t)) raise(Status::Unsupported, "cannot quantize to %s", dtype_name(t));
  if (n < 0 || n % info->block != 0)
    raise(Status::InvalidArgument, "quantize %s: %lld values is not a multiple of the block size %u", info->name,
          static_cast<long long>(n), info->block);
  uint8_t* out = static_cast<uint8_t*>(dst);
  const int64_t nb = n / info->block;
  switch (t) {
    case DType::F32:
      if (n) std::memcpy(out, src, static_cast<size_t>(n) * 4);
      return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) put_f16(out + 2 * i, src[i]);
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_bf16(src[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    case DType::Q4_K:
      for (int64_t b = 0; b < nb; ++b) quantize_q4_k(src + 256 * b, out + 144 * b);
      return;
    case DType::Q5_K:
      for (int64_t b = 0; b < nb; ++b) quantize_q5_k(src + 256 * b, out + 176 * b);
      return;
    case DType::Q6_K:
      for (int64_t b = 0; b < nb; ++b) quantize_q6_k(src + 256 * b, out + 210 * b);
      return;
    default: {
      const int bs = static_cast<int>(info->block);
      std::vector<int> q(static_cast<size_t>(bs));
      for (int64_t b = 0; b < nb; ++b) {
        const float* x = src + b * bs;
        const Grid g = grid_for_block(t, x);
        for (int i = 0; i < bs; ++i) q[i] = g.quantize(x[i]);
        encode_block(t, g, q.data(), out + b * info->bytes);
      }
    }
  }
}

void quantize_row_w8a8(const float* src, int8_t* q, float* scale, int64_t n) {
  float amax = 0;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(src[i]));
  const float s = amax / 127.0f;
  *scale = s;
  for (int64_t i = 0; i < n; ++i) q[i] = static_cast<int8_t>(s > 0 ? clampi(round_int(src[i] / s), -127, 127) : 0);
}

DequantBlockFn infer_own_dequant_block(DType t) {
  switch (t) {
    case DType::INT4_G32: return dequant_int4<32>;
    case DType::INT4_G64: return dequant_int4<64>;
    case DType::INT4_G128: return dequant_int4<128>;
    default: return nullptr;
  }
}

DType fallback_type(DType t, int64_t n) {
  for (int guard = 0; guard < 8; ++guard) {
    if (dtype_row_ok(t, n)) return t;
    switch (t) {
      case DType::Q4_K: t = DType::Q5_0; break;
      case DType::Q5_K: t = DType::Q5_1; break;
      case DType::Q6_K: t = DType::Q8_0; break;
      case DType::Q2_K: case DType::Q3_K: t = DType::Q4_0; break;
      case DType::INT4_G128: t = DType::INT4_G64; break;
      case DType::INT4_G64: t = DType::INT4_G32; break;
      default: return DType::F16;
    }
  }
  return DType::F16;
}

bool parse_quant_type(const std::string& name, int group, DType* out) {
  static const struct {
    const char* name;
    DType t;
  } kNames[] = {{"f32", DType::F32},   {"f16", DType::F16},   {"bf16", DType::BF16}, {"q8_0", DType::Q8_0},
                {"q4_0", DType::Q4_0}, {"q4_1", DType::Q4_1}, {"q5_0", DType::Q5_0}, {"q5_1", DType::Q5_1},
                {"q4_k", DType::Q4_K}, {"q5_k", DType::Q5_K}, {"q6_k", DType::Q6_K}, {"w8a8", DType::W8A8},
                {"int4_g32", DType::INT4_G32}, {"int4_g64", DType::INT4_G64}, {"int4_g128", DType::INT4_G128}};
  std::string s = name;
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "int4" || s == "w4a16") {
    switch (group) {
      case 32: *out = DType::INT4_G32; return true;
      case 64: *out = DType::INT4_G64; return true;
      case 0:
      case 128: *out = DType::INT4_G128; return true;
      default: return false;
    }
  }
  for (const auto& e : kNames) {
    if (s == e.name) {
      *out = e.t;
      return true;
    }
  }
  return false;
}

int llama_file_type(DType t) {
  switch (t) {
    case DType::F32: return 0;
    case DType::F16: return 1;
    case DType::Q4_0: return 2;
    case DType::Q4_1: return 3;
    case DType::Q8_0: return 7;
    case DType::Q5_0: return 8;
    case DType::Q5_1: return 9;
    case DType::Q4_K: return 14;  // Q4_K_S: every tensor Q4_K
    case DType::Q5_K: return 16;  // Q5_K_S
    case DType::Q6_K: return 18;
    case DType::BF16: return 32;
    default: return -1;
  }
}

}  // namespace infer
