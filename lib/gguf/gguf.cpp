// GGUF reader and writer (format versions 2 and 3).
//
// File layout (all integers little-endian; v2 and v3 are identical on disk,
// v3 only added the possibility of big-endian files, which we reject):
//
//   magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//   n_kv times:      string key | u32 value type | value
//   n_tensors times: string name | u32 n_dims | u64 dims[n_dims] | u32 ggml type | u64 offset
//   zero padding up to a multiple of `general.alignment` (default 32)
//   tensor data: each tensor at data_start + offset, offsets multiples of the alignment
//
// A string is u64 length + bytes (no terminator). A value is a scalar of the
// given type, a string, or an array: u32 element type | u64 count | elements.
//
// The parser trusts nothing: every count and length is compared with the
// bytes that remain before anything is allocated or read, and every tensor's
// extent is checked against the file before its data can be reached.
#include "gguf/gguf.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>
#include <type_traits>

#include <unistd.h>

#include "core/error.h"

static_assert(std::endian::native == std::endian::little,
              "the GGUF reader/writer assumes a little-endian host");

namespace infer {

// The elements of an array value, in one of three forms (see GgufValue).
struct GgufArray {
  enum Kind { Raw, Strings, Values };
  Kind kind = Values;
  std::vector<uint8_t> raw;       // Raw: numbers and bools, little-endian
  std::string chars;              // Strings: the strings back to back
  std::vector<uint64_t> ends;     // Strings: where each string ends in chars
  std::vector<GgufValue> values;  // Values: nested arrays, or values kept as given

  size_t size(GgufType elem) const {
    switch (kind) {
      case Raw: return raw.size() / gguf_type_size(elem);
      case Strings: return ends.size();
      case Values: return values.size();
    }
    return 0;
  }
  std::string_view string(size_t k) const {
    const uint64_t b = k == 0 ? 0 : ends[k - 1];
    return std::string_view(chars.data() + b, static_cast<size_t>(ends[k] - b));
  }
};

struct GgufArrayAccess {
  static const GgufArray* get(const GgufValue& v) { return v.type == GgufType::Array ? v.arr_.get() : nullptr; }
  static void set(GgufValue& v, std::shared_ptr<const GgufArray> a) { v.arr_ = std::move(a); }
};

size_t gguf_type_size(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::Bool: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
    default: return 0;
  }
}

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint64_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;         // ggml tensors have at most 4 dimensions
constexpr int kMaxArrayDepth = 8;        // arrays of arrays nest at most this deep

// Fewest bytes any metadata pair / tensor info can occupy: they bound how many
// of them the remaining bytes can possibly hold.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;              // key length, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // name len, n_dims, 1 dim, type, offset

bool known_value_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::F64); }

// Bytes a value of this type occupies at least (exactly, for fixed-size scalars).
uint64_t min_value_bytes(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::Bool: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
    case GgufType::String: return 8;  // the length
    case GgufType::Array: return 12;  // element type + count
  }
  return 1;
}

// ggml type numbers that exist in the wild (IQ formats, ternary, MXFP4) but
// that this library cannot run: such a file is valid yet unsupported.
const char* foreign_ggml_type_name(uint32_t t) {
  switch (t) {
    case 16: return "iq2_xxs";
    case 17: return "iq2_xs";
    case 18: return "iq3_xxs";
    case 19: return "iq1_s";
    case 20: return "iq4_nl";
    case 21: return "iq3_s";
    case 22: return "iq2_s";
    case 23: return "iq4_xs";
    case 29: return "iq1_m";
    case 34: return "tq1_0";
    case 35: return "tq2_0";
    case 39: return "mxfp4";
    default: return nullptr;
  }
}

// A name from the file, fit for an error message: at most 80 bytes, control
// bytes escaped (names in hostile files can be anything).
std::string printable(std::string_view s) {
  std::string out;
  const size_t limit = 80;
  for (size_t i = 0; i < s.size() && i < limit; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      out += strformat("\\x%02x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > limit) out += "...";
  return out;
}

bool is_pow2(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

bool is_integer_type(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::U16: case GgufType::I16:
    case GgufType::U32: case GgufType::I32: case GgufType::U64: case GgufType::I64:
      return true;
    default:
      return false;
  }
}
bool is_float_type(GgufType t) { return t == GgufType::F32 || t == GgufType::F64; }
// Types whose value lives in GgufValue::u.
bool is_unsigned(GgufType t) {
  return t == GgufType::U8 || t == GgufType::U16 || t == GgufType::U32 || t == GgufType::U64 ||
         t == GgufType::Bool;
}

// general.alignment: any integer type holding a nonzero power of two.
bool alignment_ok(const GgufValue& a) {
  if (!is_integer_type(a.type)) return false;
  return is_unsigned(a.type) ? is_pow2(a.u) : a.i > 0 && is_pow2(static_cast<uint64_t>(a.i));
}
uint64_t alignment_value(const GgufValue& a) {
  return is_unsigned(a.type) ? a.u : static_cast<uint64_t>(a.i);
}

// An integer value as text, for messages.
std::string int_text(const GgufValue& v) {
  return is_unsigned(v.type) ? std::to_string(v.u) : std::to_string(v.i);
}

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) & ~(a - 1); }

// Sequential little-endian reads with bounds checks. `where` describes the item
// being read, for messages ("metadata pair 3 'general.name'").
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  void need(uint64_t n, const std::string& where, const char* what) const {
    if (n > remaining()) {
      raise(Status::Format,
            "GGUF: truncated or corrupt file: %s: %s at offset %zu needs %llu bytes, but only %zu "
            "remain (file size %zu)",
            where.c_str(), what, pos_, static_cast<unsigned long long>(n), remaining(), size_);
    }
  }

  template <typename T>
  T read(const std::string& where, const char* what) {
    need(sizeof(T), where, what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(const std::string& where, const char* what) {
    const uint64_t len = read<uint64_t>(where, what);
    need(len, where, what);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return s;
  }

  const uint8_t* here() const { return data_ + pos_; }
  void skip(uint64_t n, const std::string& where, const char* what) {
    need(n, where, what);
    pos_ += static_cast<size_t>(n);
  }

  // Fails unless `count` items of at least `min_bytes` each can still fit.
  void check_count(uint64_t count, uint64_t min_bytes, const std::string& where,
                   const char* what) const {
    if (count > remaining() / min_bytes) {
      raise(Status::Format,
            "GGUF: corrupt file: %s: %s %llu at offset %zu cannot fit in the %zu remaining bytes",
            where.c_str(), what, static_cast<unsigned long long>(count), pos_, remaining());
    }
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Memory the parsed metadata may take: twice the file size plus 64 MiB.
// Everything the parser keeps is charged against it before it is allocated,
// so no file, however crafted, makes the reader allocate much more than the
// file itself (nested arrays and tiny metadata pairs cost more in memory
// than on disk; only an absurd number of them can reach the limit).
class Budget {
 public:
  explicit Budget(size_t file_size) : left_(2 * static_cast<uint64_t>(file_size) + (uint64_t{64} << 20)),
                                      limit_(left_) {}
  void charge(uint64_t bytes, const std::string& where) {
    if (bytes > left_) {
      raise(Status::Format, "GGUF: %s: the metadata would take more than %llu bytes of memory (the limit is "
            "twice the file size plus 64 MiB)", where.c_str(), static_cast<unsigned long long>(limit_));
    }
    left_ -= bytes;
  }

 private:
  uint64_t left_, limit_;
};

// Estimated heap cost of one nested array value and of one metadata pair.
constexpr uint64_t kNestedArrayCost = sizeof(GgufValue) + sizeof(GgufArray) + 32;
constexpr uint64_t kPairCost = sizeof(std::pair<std::string, GgufValue>) + 64;  // + the index node

GgufValue read_value(Cursor& c, GgufType type, const std::string& where, int depth, Budget& budget);

std::shared_ptr<GgufArray> read_array(Cursor& c, GgufType elem, uint64_t n, const std::string& where, int depth,
                                      Budget& budget) {
  auto a = std::make_shared<GgufArray>();
  const size_t esize = gguf_type_size(elem);
  if (esize > 0) {
    // check_count() made sure n * esize bytes remain.
    a->kind = GgufArray::Raw;
    const uint64_t bytes = n * esize;
    budget.charge(bytes, where);
    const uint8_t* p = c.here();
    c.skip(bytes, where, "array elements");
    if (elem == GgufType::Bool) {
      for (uint64_t k = 0; k < n; ++k) {
        if (p[k] > 1) {
          raise(Status::Format, "GGUF: %s: bool value %u at offset %zu is neither 0 nor 1", where.c_str(), p[k],
                c.pos() - static_cast<size_t>(bytes - k));
        }
      }
    }
    a->raw.assign(p, p + bytes);
  } else if (elem == GgufType::String) {
    a->kind = GgufArray::Strings;
    budget.charge(n * sizeof(uint64_t), where);
    a->ends.reserve(static_cast<size_t>(n));
    for (uint64_t k = 0; k < n; ++k) {
      const uint64_t len = c.read<uint64_t>(where, "string length");
      c.need(len, where, "string");
      budget.charge(len, where);
      a->chars.append(reinterpret_cast<const char*>(c.here()), static_cast<size_t>(len));
      c.skip(len, where, "string");
      a->ends.push_back(a->chars.size());
    }
    a->chars.shrink_to_fit();
  } else {
    a->kind = GgufArray::Values;
    budget.charge(n * kNestedArrayCost, where);
    a->values.reserve(static_cast<size_t>(n));
    for (uint64_t k = 0; k < n; ++k) a->values.push_back(read_value(c, elem, where, depth + 1, budget));
  }
  return a;
}

GgufValue read_value(Cursor& c, GgufType type, const std::string& where, int depth, Budget& budget) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufType::U8: v.u = c.read<uint8_t>(where, "u8 value"); break;
    case GgufType::I8: v.i = c.read<int8_t>(where, "i8 value"); break;
    case GgufType::U16: v.u = c.read<uint16_t>(where, "u16 value"); break;
    case GgufType::I16: v.i = c.read<int16_t>(where, "i16 value"); break;
    case GgufType::U32: v.u = c.read<uint32_t>(where, "u32 value"); break;
    case GgufType::I32: v.i = c.read<int32_t>(where, "i32 value"); break;
    case GgufType::U64: v.u = c.read<uint64_t>(where, "u64 value"); break;
    case GgufType::I64: v.i = c.read<int64_t>(where, "i64 value"); break;
    case GgufType::F32: v.f = c.read<float>(where, "f32 value"); break;
    case GgufType::F64: v.f = c.read<double>(where, "f64 value"); break;
    case GgufType::Bool: {
      const size_t at = c.pos();
      const uint8_t b = c.read<uint8_t>(where, "bool value");
      if (b > 1) {
        raise(Status::Format, "GGUF: %s: bool value %u at offset %zu is neither 0 nor 1",
              where.c_str(), b, at);
      }
      v.u = b;
      break;
    }
    case GgufType::String: {
      const uint64_t len = c.read<uint64_t>(where, "string length");
      c.need(len, where, "string");
      budget.charge(len, where);
      v.s.assign(reinterpret_cast<const char*>(c.here()), static_cast<size_t>(len));
      c.skip(len, where, "string");
      break;
    }
    case GgufType::Array: {
      if (depth >= kMaxArrayDepth) {
        raise(Status::Format, "GGUF: %s: arrays nested more than %d deep at offset %zu",
              where.c_str(), kMaxArrayDepth, c.pos());
      }
      const size_t at = c.pos();
      const uint32_t elem = c.read<uint32_t>(where, "array element type");
      if (!known_value_type(elem)) {
        raise(Status::Format, "GGUF: %s: unknown array element type %u at offset %zu",
              where.c_str(), elem, at);
      }
      v.elem = static_cast<GgufType>(elem);
      const uint64_t n = c.read<uint64_t>(where, "array length");
      c.check_count(n, min_value_bytes(v.elem), where, "array length");
      GgufArrayAccess::set(v, read_array(c, v.elem, n, where, depth, budget));
      break;
    }
  }
  return v;
}

}  // namespace

// ---- GgufValue ------------------------------------------------------------------------

std::string gguf_dims_text(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

std::string gguf_value_text(const GgufValue& v) {
  switch (v.type) {
    case GgufType::String: return v.s;
    case GgufType::Bool: return v.u ? "true" : "false";
    case GgufType::F32:
    case GgufType::F64: return strformat("%.9g", v.f);
    case GgufType::I8: case GgufType::I16: case GgufType::I32: case GgufType::I64:
      return std::to_string(v.i);
    case GgufType::Array: {
      std::string s = "[";
      for (size_t i = 0; i < v.size(); ++i) {
        if (i) s += ", ";
        s += gguf_value_text(v.at(i));
      }
      return s + "]";
    }
    default: return std::to_string(v.u);
  }
}

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::U8: return "u8";
    case GgufType::I8: return "i8";
    case GgufType::U16: return "u16";
    case GgufType::I16: return "i16";
    case GgufType::U32: return "u32";
    case GgufType::I32: return "i32";
    case GgufType::F32: return "f32";
    case GgufType::Bool: return "bool";
    case GgufType::String: return "string";
    case GgufType::Array: return "array";
    case GgufType::U64: return "u64";
    case GgufType::I64: return "i64";
    case GgufType::F64: return "f64";
  }
  return "unknown";
}

GgufValue GgufValue::make_u32(uint32_t v) {
  GgufValue x;
  x.type = GgufType::U32;
  x.u = v;
  return x;
}
GgufValue GgufValue::make_i32(int32_t v) {
  GgufValue x;
  x.type = GgufType::I32;
  x.i = v;
  return x;
}
GgufValue GgufValue::make_u64(uint64_t v) {
  GgufValue x;
  x.type = GgufType::U64;
  x.u = v;
  return x;
}
GgufValue GgufValue::make_f32(float v) {
  GgufValue x;
  x.type = GgufType::F32;
  x.f = v;
  return x;
}
GgufValue GgufValue::make_bool(bool v) {
  GgufValue x;
  x.type = GgufType::Bool;
  x.u = v ? 1 : 0;
  return x;
}
GgufValue GgufValue::make_string(std::string v) {
  GgufValue x;
  x.type = GgufType::String;
  x.s = std::move(v);
  return x;
}
namespace {

// Whether a value of type t holds a number its type can store (what the
// writer requires), so it can live in a Raw array.
bool fits_raw(const GgufValue& v, GgufType t) {
  if (v.type != t) return false;
  switch (t) {
    case GgufType::U8: return v.u <= std::numeric_limits<uint8_t>::max();
    case GgufType::U16: return v.u <= std::numeric_limits<uint16_t>::max();
    case GgufType::U32: return v.u <= std::numeric_limits<uint32_t>::max();
    case GgufType::U64: return true;
    case GgufType::Bool: return v.u <= 1;
    case GgufType::I8: return v.i >= std::numeric_limits<int8_t>::min() && v.i <= std::numeric_limits<int8_t>::max();
    case GgufType::I16: return v.i >= std::numeric_limits<int16_t>::min() && v.i <= std::numeric_limits<int16_t>::max();
    case GgufType::I32: return v.i >= std::numeric_limits<int32_t>::min() && v.i <= std::numeric_limits<int32_t>::max();
    case GgufType::I64: return true;
    case GgufType::F32: case GgufType::F64: return true;
    default: return false;
  }
}

// Appends a number or bool's little-endian bytes (fits_raw was checked).
void append_raw(std::vector<uint8_t>& out, const GgufValue& v) {
  auto put = [&](auto x) {
    const uint8_t* b = reinterpret_cast<const uint8_t*>(&x);
    out.insert(out.end(), b, b + sizeof(x));
  };
  switch (v.type) {
    case GgufType::U8: case GgufType::Bool: put(static_cast<uint8_t>(v.u)); break;
    case GgufType::U16: put(static_cast<uint16_t>(v.u)); break;
    case GgufType::U32: put(static_cast<uint32_t>(v.u)); break;
    case GgufType::U64: put(v.u); break;
    case GgufType::I8: put(static_cast<int8_t>(v.i)); break;
    case GgufType::I16: put(static_cast<int16_t>(v.i)); break;
    case GgufType::I32: put(static_cast<int32_t>(v.i)); break;
    case GgufType::I64: put(v.i); break;
    case GgufType::F32: put(static_cast<float>(v.f)); break;
    case GgufType::F64: put(v.f); break;
    default: break;
  }
}

// Element k of a Raw array as a scalar value.
GgufValue raw_element(const GgufArray& a, GgufType t, size_t k) {
  GgufValue v;
  v.type = t;
  const uint8_t* p = a.raw.data() + k * gguf_type_size(t);
  auto get = [&](auto x) {
    std::memcpy(&x, p, sizeof(x));
    return x;
  };
  switch (t) {
    case GgufType::U8: case GgufType::Bool: v.u = get(uint8_t{}); break;
    case GgufType::U16: v.u = get(uint16_t{}); break;
    case GgufType::U32: v.u = get(uint32_t{}); break;
    case GgufType::U64: v.u = get(uint64_t{}); break;
    case GgufType::I8: v.i = get(int8_t{}); break;
    case GgufType::I16: v.i = get(int16_t{}); break;
    case GgufType::I32: v.i = get(int32_t{}); break;
    case GgufType::I64: v.i = get(int64_t{}); break;
    case GgufType::F32: v.f = get(float{}); break;
    case GgufType::F64: v.f = get(double{}); break;
    default: break;
  }
  return v;
}

GgufValue array_value(GgufType elem, std::shared_ptr<GgufArray> a) {
  GgufValue x;
  x.type = GgufType::Array;
  x.elem = elem;
  GgufArrayAccess::set(x, std::move(a));
  return x;
}

}  // namespace

GgufValue GgufValue::make_array(GgufType elem, std::vector<GgufValue> items) {
  auto a = std::make_shared<GgufArray>();
  const bool raw = gguf_type_size(elem) > 0 &&
                   std::all_of(items.begin(), items.end(), [&](const GgufValue& v) { return fits_raw(v, elem); });
  const bool strings = elem == GgufType::String && std::all_of(items.begin(), items.end(), [](const GgufValue& v) {
                         return v.type == GgufType::String;
                       });
  if (raw) {
    a->kind = GgufArray::Raw;
    a->raw.reserve(items.size() * gguf_type_size(elem));
    for (const GgufValue& v : items) append_raw(a->raw, v);
  } else if (strings) {
    a->kind = GgufArray::Strings;
    for (const GgufValue& v : items) {
      a->chars += v.s;
      a->ends.push_back(a->chars.size());
    }
  } else {
    a->kind = GgufArray::Values;  // nested arrays, or values the writer will refuse
    a->values = std::move(items);
  }
  return array_value(elem, std::move(a));
}
GgufValue GgufValue::make_string_array(const std::vector<std::string>& items) {
  auto a = std::make_shared<GgufArray>();
  a->kind = GgufArray::Strings;
  a->ends.reserve(items.size());
  for (const auto& s : items) {
    a->chars += s;
    a->ends.push_back(a->chars.size());
  }
  return array_value(GgufType::String, std::move(a));
}
GgufValue GgufValue::make_f32_array(const std::vector<float>& items) {
  std::vector<uint8_t> b(items.size() * sizeof(float));
  if (!items.empty()) std::memcpy(b.data(), items.data(), b.size());
  return make_raw_array(GgufType::F32, std::move(b));
}
GgufValue GgufValue::make_i32_array(const std::vector<int32_t>& items) {
  std::vector<uint8_t> b(items.size() * sizeof(int32_t));
  if (!items.empty()) std::memcpy(b.data(), items.data(), b.size());
  return make_raw_array(GgufType::I32, std::move(b));
}
GgufValue GgufValue::make_raw_array(GgufType elem, std::vector<uint8_t> bytes) {
  const size_t esize = gguf_type_size(elem);
  if (esize == 0 || bytes.size() % esize != 0)
    raise(Status::InvalidArgument, "GGUF: %zu bytes are not whole %s array elements", bytes.size(),
          gguf_type_name(elem));
  if (elem == GgufType::Bool && std::any_of(bytes.begin(), bytes.end(), [](uint8_t b) { return b > 1; }))
    raise(Status::InvalidArgument, "GGUF: bool array element is neither 0 nor 1");
  auto a = std::make_shared<GgufArray>();
  a->kind = GgufArray::Raw;
  a->raw = std::move(bytes);
  return array_value(elem, std::move(a));
}

size_t GgufValue::size() const {
  const GgufArray* a = GgufArrayAccess::get(*this);
  return a ? a->size(elem) : 0;
}

GgufValue GgufValue::at(size_t k) const {
  const GgufArray* a = GgufArrayAccess::get(*this);
  if (!a || k >= a->size(elem)) raise(Status::InvalidArgument, "GGUF: array index %zu out of range", k);
  switch (a->kind) {
    case GgufArray::Raw: return raw_element(*a, elem, k);
    case GgufArray::Strings: return make_string(std::string(a->string(k)));
    case GgufArray::Values: return a->values[k];
  }
  return {};
}

std::string_view GgufValue::string_at(size_t k) const {
  const GgufArray* a = GgufArrayAccess::get(*this);
  if (!a || k >= a->size(elem)) raise(Status::InvalidArgument, "GGUF: array index %zu out of range", k);
  if (a->kind == GgufArray::Strings) return a->string(k);
  if (a->kind == GgufArray::Values && a->values[k].type == GgufType::String) return a->values[k].s;
  raise(Status::Format, "GGUF: expected a string, found a %s", gguf_type_name(elem));
}

int64_t GgufValue::int_at(size_t k) const {
  const GgufArray* a = GgufArrayAccess::get(*this);
  if (a && a->kind == GgufArray::Values && k < a->values.size()) return a->values[k].as_int();
  return at(k).as_int();
}

double GgufValue::float_at(size_t k) const {
  const GgufArray* a = GgufArrayAccess::get(*this);
  if (a && a->kind == GgufArray::Values && k < a->values.size()) return a->values[k].as_float();
  return at(k).as_float();
}

const uint8_t* GgufValue::raw() const {
  const GgufArray* a = GgufArrayAccess::get(*this);
  return a && a->kind == GgufArray::Raw ? a->raw.data() : nullptr;
}

size_t GgufValue::memory_bytes() const {
  size_t n = s.capacity() > 15 ? s.capacity() : 0;
  if (const GgufArray* a = GgufArrayAccess::get(*this)) {
    n += sizeof(GgufArray) + a->raw.capacity() + a->chars.capacity() + a->ends.capacity() * sizeof(uint64_t) +
         a->values.capacity() * sizeof(GgufValue);
    for (const GgufValue& v : a->values) n += v.memory_bytes();
  }
  return n;
}

bool GgufValue::is_integer() const { return is_integer_type(type); }
bool GgufValue::is_float() const { return is_float_type(type); }

int64_t GgufValue::as_int() const {
  if (is_unsigned(type)) {
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      raise(Status::Format, "GGUF: %s value %llu does not fit in int64", gguf_type_name(type),
            static_cast<unsigned long long>(u));
    }
    return static_cast<int64_t>(u);
  }
  if (is_integer()) return i;
  if (is_float()) {
    // Only a whole number within range converts; anything else would be a guess.
    // 2^63 is exactly representable, so `f < 2^63` is the precise upper bound.
    if (!(std::trunc(f) == f && f >= -9223372036854775808.0 && f < 9223372036854775808.0)) {
      raise(Status::Format, "GGUF: %s value %g is not an integer", gguf_type_name(type), f);
    }
    return static_cast<int64_t>(f);
  }
  raise(Status::Format, "GGUF: expected a number, found a %s", gguf_type_name(type));
}

double GgufValue::as_float() const {
  if (is_unsigned(type)) return static_cast<double>(u);
  if (is_integer()) return static_cast<double>(i);
  if (is_float()) return f;
  raise(Status::Format, "GGUF: expected a number, found a %s", gguf_type_name(type));
}

// Exact comparison: floats compare by bit pattern, so a NaN equals itself and
// -0.0 differs from +0.0 (what a round trip must preserve).
bool GgufValue::operator==(const GgufValue& o) const {
  if (type != o.type) return false;
  switch (type) {
    case GgufType::String: return s == o.s;
    case GgufType::Array: {
      if (elem != o.elem) return false;
      const GgufArray* a = GgufArrayAccess::get(*this);
      const GgufArray* b = GgufArrayAccess::get(o);
      const size_t n = size();
      if (n != o.size()) return false;
      if (a && b && a->kind == b->kind && a->kind == GgufArray::Raw) return a->raw == b->raw;  // bits, like floats
      if (a && b && a->kind == b->kind && a->kind == GgufArray::Strings) return a->chars == b->chars && a->ends == b->ends;
      for (size_t k = 0; k < n; ++k)
        if (!(at(k) == o.at(k))) return false;
      return true;
    }
    case GgufType::F32: case GgufType::F64:
      return std::bit_cast<uint64_t>(f) == std::bit_cast<uint64_t>(o.f);
    default:
      return is_unsigned(type) ? u == o.u : i == o.i;
  }
}

// ---- GgufTensorInfo / GgufFile ----------------------------------------------------------

int64_t GgufTensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;  // overflow was ruled out when the dims were accepted
  return n;
}

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path, bool use_mmap) {
  return from_file(MappedFile::open(path, use_mmap));
}

std::unique_ptr<GgufFile> GgufFile::from_memory(const void* data, size_t size) {
  return from_file(MappedFile::borrow(data, size));
}

std::unique_ptr<GgufFile> GgufFile::from_file(std::unique_ptr<MappedFile> file) {
  if (!file) raise(Status::InvalidArgument, "GGUF: no file given");
  std::unique_ptr<GgufFile> g(new GgufFile());
  g->file_ = std::move(file);
  // Errors name the file when there is one.
  auto fail = [&](Status s, const char* msg) -> Error {
    if (g->file_->path().empty()) return Error(s, msg);
    return Error(s, strformat("%s: %s", g->file_->path().c_str(), msg));
  };
  try {
    g->parse();
  } catch (const Error& e) {
    throw fail(e.status(), e.what());
  } catch (const std::bad_alloc&) {
    // Sizes are bounded by the file size, but metadata still takes memory.
    throw fail(Status::OutOfMemory, "GGUF: out of memory while reading the metadata");
  }
  return g;
}

void GgufFile::parse() {
  const size_t size = file_->size();
  Cursor c(file_->data(), size);

  if (size < 4 || c.read<uint32_t>("header", "magic") != kMagic) {
    raise(Status::Format, "not a GGUF file (no \"GGUF\" magic at offset 0; file size %zu)", size);
  }
  version_ = c.read<uint32_t>("header", "version");
  if (version_ != 2 && version_ != 3) {
    // A big-endian file (GGUF v3 allows them) shows its version byte-swapped.
    if (__builtin_bswap32(version_) == 2 || __builtin_bswap32(version_) == 3) {
      raise(Status::Unsupported, "GGUF: big-endian files are not supported");
    }
    raise(Status::Unsupported, "GGUF: version %u is not supported (only versions 2 and 3)",
          version_);
  }
  const uint64_t n_tensors = c.read<uint64_t>("header", "tensor count");
  const uint64_t n_kv = c.read<uint64_t>("header", "metadata count");
  c.check_count(n_kv, kMinKvBytes, "header", "metadata count");
  c.check_count(n_tensors, kMinTensorInfoBytes, "header", "tensor count");
  Budget budget(size);

  // ---- metadata ----
  budget.charge(n_kv * kPairCost, "header: metadata count");
  kv_.reserve(static_cast<size_t>(n_kv));
  for (uint64_t k = 0; k < n_kv; ++k) {
    const size_t at = c.pos();
    std::string where = strformat("metadata pair %llu", static_cast<unsigned long long>(k));
    std::string key = c.read_string(where, "key");
    budget.charge(2 * key.size(), where);  // the key and its index entry
    where += " '" + printable(key) + "'";
    if (kv_index_.count(key)) {
      raise(Status::Format, "GGUF: %s at offset %zu: duplicate key", where.c_str(), at);
    }
    const size_t type_at = c.pos();
    const uint32_t type = c.read<uint32_t>(where, "value type");
    if (!known_value_type(type)) {
      raise(Status::Format, "GGUF: %s: unknown value type %u at offset %zu", where.c_str(), type,
            type_at);
    }
    GgufValue v = read_value(c, static_cast<GgufType>(type), where, 0, budget);
    kv_index_.emplace(key, kv_.size());
    kv_.emplace_back(std::move(key), std::move(v));
  }

  if (const GgufValue* a = find("general.alignment")) {
    if (!alignment_ok(*a)) {
      raise(Status::Format, "GGUF: general.alignment must be a nonzero power of two (found %s %s)",
            gguf_type_name(a->type), a->is_integer() ? int_text(*a).c_str() : "");
    }
    alignment_ = alignment_value(*a);
  }

  // ---- tensor infos ----
  budget.charge(n_tensors * (sizeof(GgufTensorInfo) + 64 + kMaxDims * sizeof(int64_t)), "header: tensor count");
  tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    std::string where = strformat("tensor %llu", static_cast<unsigned long long>(k));
    GgufTensorInfo t;
    t.name = c.read_string(where, "name");
    budget.charge(2 * t.name.size(), where);  // the name and its index entry
    where += " '" + printable(t.name) + "'";
    if (tensor_index_.count(t.name)) raise(Status::Format, "GGUF: %s: duplicate tensor name", where.c_str());

    const uint32_t n_dims = c.read<uint32_t>(where, "dimension count");
    if (n_dims < 1 || n_dims > kMaxDims) {
      raise(Status::Format, "GGUF: %s: %u dimensions (must be 1 to %u)", where.c_str(), n_dims,
            kMaxDims);
    }
    int64_t n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim = c.read<uint64_t>(where, "dimension");
      if (dim < 1 || dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          __builtin_mul_overflow(n_elements, static_cast<int64_t>(dim), &n_elements)) {
        raise(Status::Format, "GGUF: %s: dimension %u is %llu (must be >= 1, and the element "
              "count must fit in int64)", where.c_str(), d, static_cast<unsigned long long>(dim));
      }
      t.dims.push_back(static_cast<int64_t>(dim));
    }

    const uint32_t type = c.read<uint32_t>(where, "type");
    const DTypeInfo* info = dtype_info(type);
    if (!info) {
      if (const char* foreign = foreign_ggml_type_name(type)) {
        raise(Status::Unsupported, "GGUF: %s has tensor type %s (ggml type %u), which this "
              "library does not support", where.c_str(), foreign, type);
      }
      raise(Status::Format, "GGUF: %s: unknown tensor type %u", where.c_str(), type);
    }
    t.type = static_cast<DType>(type);
    if (t.dims[0] % info->block != 0) {
      raise(Status::Format, "GGUF: %s: row length %lld is not a multiple of the %s block size %u",
            where.c_str(), static_cast<long long>(t.dims[0]), info->name, info->block);
    }
    if (__builtin_mul_overflow(static_cast<uint64_t>(n_elements / info->block),
                               static_cast<uint64_t>(info->bytes), &t.nbytes)) {
      raise(Status::Format, "GGUF: %s: size in bytes overflows", where.c_str());
    }

    t.offset = c.read<uint64_t>(where, "data offset");
    if (t.offset % alignment_ != 0) {
      raise(Status::Format, "GGUF: %s: data offset %llu is not a multiple of the alignment %llu",
            where.c_str(), static_cast<unsigned long long>(t.offset),
            static_cast<unsigned long long>(alignment_));
    }
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  // ---- data section: it starts at the next multiple of the alignment ----
  data_offset_ = static_cast<size_t>(align_up(c.pos(), alignment_));
  for (const GgufTensorInfo& t : tensors_) {
    const uint64_t avail = data_offset_ <= size ? size - data_offset_ : 0;
    if (t.offset > avail || t.nbytes > avail - t.offset) {
      raise(Status::Format,
            "GGUF: tensor '%s': data offset %llu + %llu bytes exceeds the %llu bytes of tensor "
            "data (data section starts at %zu, file size %zu)",
            printable(t.name).c_str(), static_cast<unsigned long long>(t.offset),
            static_cast<unsigned long long>(t.nbytes), static_cast<unsigned long long>(avail),
            data_offset_, size);
    }
  }
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

namespace {
[[noreturn]] void type_mismatch(std::string_view key, const char* expected, const GgufValue& v) {
  std::string found = gguf_type_name(v.type);
  if (v.type == GgufType::Array) found = std::string("array of ") + gguf_type_name(v.elem);
  raise(Status::Format, "GGUF: key '%s' should be %s but is %s", printable(key).c_str(), expected,
        found.c_str());
}
}  // namespace

std::optional<std::string> GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::String) type_mismatch(key, "a string", *v);
  return v->s;
}

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_integer()) type_mismatch(key, "an integer", *v);
  try {
    return v->as_int();
  } catch (const Error& e) {
    raise(Status::Format, "GGUF: key '%s': %s", printable(key).c_str(), e.what());
  }
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_integer() && !v->is_float()) type_mismatch(key, "a number", *v);
  return v->as_float();
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::Bool) type_mismatch(key, "a bool", *v);
  return v->u != 0;
}

const GgufValue* GgufFile::get_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v && v->type != GgufType::Array) type_mismatch(key, "an array", *v);
  return v;
}

std::vector<std::string> GgufFile::get_string_array(std::string_view key) const {
  std::vector<std::string> out;
  const GgufValue* v = get_array(key);
  if (!v) return out;
  if (v->elem != GgufType::String) type_mismatch(key, "an array of strings", *v);
  const size_t n = v->size();
  out.reserve(n);
  for (size_t k = 0; k < n; ++k) out.emplace_back(v->string_at(k));
  return out;
}

std::vector<float> GgufFile::get_f32_array(std::string_view key) const {
  std::vector<float> out;
  const GgufValue* v = get_array(key);
  if (!v) return out;
  if (!is_integer_type(v->elem) && !is_float_type(v->elem)) type_mismatch(key, "an array of numbers", *v);
  const size_t n = v->size();
  out.resize(n);
  if (v->elem == GgufType::F32 && v->raw()) {
    if (n) std::memcpy(out.data(), v->raw(), n * sizeof(float));
  } else {
    for (size_t k = 0; k < n; ++k) out[k] = static_cast<float>(v->float_at(k));
  }
  return out;
}

std::vector<int64_t> GgufFile::get_int_array(std::string_view key) const {
  std::vector<int64_t> out;
  const GgufValue* v = get_array(key);
  if (!v) return out;
  if (!is_integer_type(v->elem)) type_mismatch(key, "an array of integers", *v);
  const size_t n = v->size();
  out.reserve(n);
  try {
    for (size_t k = 0; k < n; ++k) out.push_back(v->int_at(k));
  } catch (const Error& e) {
    raise(Status::Format, "GGUF: key '%s': %s", printable(key).c_str(), e.what());
  }
  return out;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const uint8_t* GgufFile::tensor_data(const GgufTensorInfo& t) const {
  if (t.source == 0) return file_->data() + data_offset_ + t.offset;
  return more_[t.source - 1]->data() + t.offset;
}

void GgufFile::release(const void* p, size_t n) const {
  if (file_->contains(p)) return file_->release(p, n);
  for (const auto& f : more_)
    if (f->contains(p)) return f->release(p, n);
}

void GgufFile::advise_random(const void* p, size_t n) const {
  if (file_->contains(p)) return file_->advise_random(p, n);
  for (const auto& f : more_)
    if (f->contains(p)) return f->advise_random(p, n);
}

void GgufFile::release_all() const {
  for (const GgufTensorInfo& t : tensors_) release(tensor_data(t), t.nbytes);
}

void GgufFile::check_intact() const {
  file_->check_intact();
  for (const auto& f : more_) f->check_intact();
}

std::unique_ptr<GgufFile> GgufFile::assemble(std::vector<std::unique_ptr<MappedFile>> files,
                                             std::vector<std::pair<std::string, GgufValue>> metadata,
                                             std::vector<GgufTensorInfo> tensors) {
  if (files.empty() || !files[0]) raise(Status::InvalidArgument, "GGUF view: no file given");
  std::unique_ptr<GgufFile> g(new GgufFile());
  g->version_ = 3;
  g->data_offset_ = 0;
  g->file_ = std::move(files[0]);
  for (size_t k = 1; k < files.size(); ++k) {
    if (!files[k]) raise(Status::InvalidArgument, "GGUF view: file %zu is missing", k);
    g->more_.push_back(std::move(files[k]));
  }
  for (auto& [key, value] : metadata) {
    if (key.empty()) raise(Status::Format, "GGUF view: empty metadata key");
    auto it = g->kv_index_.find(key);
    if (it != g->kv_index_.end()) {
      g->kv_[it->second].second = std::move(value);
    } else {
      g->kv_index_.emplace(key, g->kv_.size());
      g->kv_.emplace_back(key, std::move(value));
    }
  }
  g->tensors_.reserve(tensors.size());
  for (GgufTensorInfo& t : tensors) {
    const char* nm = t.name.c_str();
    if (t.name.empty()) raise(Status::Format, "GGUF view: a tensor has an empty name");
    if (g->tensor_index_.count(t.name)) raise(Status::Format, "GGUF view: duplicate tensor name '%s'", nm);
    if (t.dims.empty() || t.dims.size() > 4) raise(Status::Format, "tensor '%s' has %zu dimensions", nm, t.dims.size());
    if (!dtype_info(t.type)) raise(Status::Format, "tensor '%s' has an unknown type", nm);
    uint64_t n = 1;
    for (int64_t d : t.dims) {
      if (d <= 0 || static_cast<uint64_t>(d) > (uint64_t(1) << 40) / n)
        raise(Status::Format, "tensor '%s' has a bad dimension %lld", nm, (long long)d);
      n *= static_cast<uint64_t>(d);
    }
    if (!dtype_row_ok(t.type, t.dims[0]))
      raise(Status::Format, "tensor '%s': rows of %lld values are not whole %s blocks", nm, (long long)t.dims[0],
            dtype_name(t.type));
    t.nbytes = static_cast<uint64_t>(dtype_row_bytes(t.type, t.dims[0])) * (n / static_cast<uint64_t>(t.dims[0]));
    if (t.source >= g->n_files()) raise(Status::Format, "tensor '%s' names file %u of %zu", nm, t.source, g->n_files());
    const MappedFile& f = t.source == 0 ? *g->file_ : *g->more_[t.source - 1];
    if (t.offset > f.size() || t.nbytes > f.size() - t.offset)
      raise(Status::Format, "tensor '%s' (%llu bytes at %llu) runs past the end of its file (%zu bytes)", nm,
            (unsigned long long)t.nbytes, (unsigned long long)t.offset, f.size());
    g->tensor_index_.emplace(t.name, g->tensors_.size());
    g->tensors_.push_back(std::move(t));
  }
  return g;
}

// ---- GgufWriter ---------------------------------------------------------------------------

namespace {

class Out {
 public:
  explicit Out(std::vector<uint8_t>& buf) : buf_(buf) {}
  void bytes(const void* p, size_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    buf_.insert(buf_.end(), b, b + n);
  }
  template <typename T>
  void put(T v) { bytes(&v, sizeof(T)); }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    bytes(s.data(), s.size());
  }
  void pad_to(uint64_t alignment) { buf_.resize(static_cast<size_t>(align_up(buf_.size(), alignment)), 0); }

 private:
  std::vector<uint8_t>& buf_;
};

[[noreturn]] void bad_value(const std::string& key, const char* why) {
  raise(Status::InvalidArgument, "GGUF writer: key '%s': %s", key.c_str(), why);
}

// Checks that an integer fits the declared type, then writes it.
template <typename T>
void put_int(Out& o, const GgufValue& v, const std::string& key) {
  if constexpr (std::is_unsigned_v<T>) {
    if (v.u > std::numeric_limits<T>::max()) bad_value(key, "unsigned value out of range for its type");
  } else {
    if (v.i < std::numeric_limits<T>::min() || v.i > std::numeric_limits<T>::max()) {
      bad_value(key, "signed value out of range for its type");
    }
  }
  o.put<T>(std::is_unsigned_v<T> ? static_cast<T>(v.u) : static_cast<T>(v.i));
}

void put_value(Out& o, const GgufValue& v, const std::string& key, int depth) {
  switch (v.type) {
    case GgufType::U8: put_int<uint8_t>(o, v, key); break;
    case GgufType::I8: put_int<int8_t>(o, v, key); break;
    case GgufType::U16: put_int<uint16_t>(o, v, key); break;
    case GgufType::I16: put_int<int16_t>(o, v, key); break;
    case GgufType::U32: put_int<uint32_t>(o, v, key); break;
    case GgufType::I32: put_int<int32_t>(o, v, key); break;
    case GgufType::U64: put_int<uint64_t>(o, v, key); break;
    case GgufType::I64: put_int<int64_t>(o, v, key); break;
    case GgufType::Bool:
      if (v.u > 1) bad_value(key, "bool value is neither 0 nor 1");
      o.put<uint8_t>(static_cast<uint8_t>(v.u));
      break;
    case GgufType::F32: o.put<float>(static_cast<float>(v.f)); break;
    case GgufType::F64: o.put<double>(v.f); break;
    case GgufType::String: o.str(v.s); break;
    case GgufType::Array: {
      if (depth >= kMaxArrayDepth) bad_value(key, "arrays nested too deep");
      if (!known_value_type(static_cast<uint32_t>(v.elem))) bad_value(key, "unknown array element type");
      o.put<uint32_t>(static_cast<uint32_t>(v.elem));
      o.put<uint64_t>(v.size());
      const GgufArray* a = GgufArrayAccess::get(v);
      if (a && a->kind == GgufArray::Raw) {  // numbers and bools, checked when the array was made
        o.bytes(a->raw.data(), a->raw.size());
      } else if (a && a->kind == GgufArray::Strings) {
        for (size_t k = 0; k < v.size(); ++k) {
          const std::string_view e = v.string_at(k);
          o.put<uint64_t>(e.size());
          o.bytes(e.data(), e.size());
        }
      } else {
        for (size_t k = 0; k < v.size(); ++k) {
          const GgufValue e = v.at(k);
          if (e.type != v.elem) bad_value(key, "array element of the wrong type");
          put_value(o, e, key, depth + 1);
        }
      }
      break;
    }
    default:
      bad_value(key, "unknown value type");
  }
}

}  // namespace

void GgufWriter::set(const std::string& key, GgufValue value) {
  for (auto& kv : kv_) {
    if (kv.first == key) {
      kv.second = std::move(value);
      return;
    }
  }
  kv_.emplace_back(key, std::move(value));
}

void GgufWriter::add_tensor(const std::string& name, const std::vector<int64_t>& dims, DType type,
                            const void* data, size_t nbytes) {
  for (const Tensor& t : tensors_) {
    if (t.name == name) raise(Status::InvalidArgument, "GGUF writer: duplicate tensor '%s'", name.c_str());
  }
  const DTypeInfo* info = dtype_info(type);
  if (!info) raise(Status::InvalidArgument, "GGUF writer: tensor '%s': unknown type", name.c_str());
  if (dims.empty() || dims.size() > kMaxDims) {
    raise(Status::InvalidArgument, "GGUF writer: tensor '%s': %zu dimensions (must be 1 to %u)",
          name.c_str(), dims.size(), kMaxDims);
  }
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 1 || __builtin_mul_overflow(n, d, &n)) {
      raise(Status::InvalidArgument, "GGUF writer: tensor '%s': bad dimension %lld", name.c_str(),
            static_cast<long long>(d));
    }
  }
  if (dims[0] % info->block != 0) {
    raise(Status::InvalidArgument, "GGUF writer: tensor '%s': row length %lld is not a multiple of "
          "the %s block size %u", name.c_str(), static_cast<long long>(dims[0]), info->name,
          info->block);
  }
  uint64_t expected = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(n / info->block), info->bytes, &expected) ||
      expected != nbytes) {
    raise(Status::InvalidArgument, "GGUF writer: tensor '%s': %zu bytes given, its dims and type "
          "need %llu", name.c_str(), nbytes, static_cast<unsigned long long>(expected));
  }
  if (nbytes > 0 && data == nullptr) {
    raise(Status::InvalidArgument, "GGUF writer: tensor '%s': no data", name.c_str());
  }
  const uint8_t* p = static_cast<const uint8_t*>(data);
  tensors_.push_back(Tensor{name, dims, type, std::vector<uint8_t>(p, p + nbytes)});
}

// Everything before the tensor data: header, metadata, tensor infos and, when
// there are tensors, the padding that aligns the data section.
std::vector<uint8_t> GgufWriter::header_bytes(uint64_t* alignment_out) const {
  if (version_ != 2 && version_ != 3) {
    raise(Status::InvalidArgument, "GGUF writer: cannot write version %u", version_);
  }
  uint64_t alignment = kDefaultAlignment;
  for (const auto& kv : kv_) {
    if (kv.first != "general.alignment") continue;
    if (!alignment_ok(kv.second)) {
      raise(Status::InvalidArgument, "GGUF writer: general.alignment must be a nonzero power of two");
    }
    alignment = alignment_value(kv.second);
  }

  std::vector<uint8_t> buf;
  Out o(buf);
  o.put<uint32_t>(kMagic);
  o.put<uint32_t>(version_);
  o.put<uint64_t>(tensors_.size());
  o.put<uint64_t>(kv_.size());
  for (const auto& [key, value] : kv_) {
    o.str(key);
    o.put<uint32_t>(static_cast<uint32_t>(value.type));
    put_value(o, value, key, 0);
  }
  // Each tensor starts at the next multiple of the alignment after the previous one.
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    o.str(t.name);
    o.put<uint32_t>(static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) o.put<uint64_t>(static_cast<uint64_t>(d));
    o.put<uint32_t>(static_cast<uint32_t>(t.type));
    o.put<uint64_t>(offset);
    offset = align_up(offset + t.data.size(), alignment);
  }
  // A file without tensors ends right after its header (as vocabulary-only
  // files do); otherwise the data section starts aligned.
  if (!tensors_.empty()) o.pad_to(alignment);
  *alignment_out = alignment;
  return buf;
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
  uint64_t alignment = 0;
  std::vector<uint8_t> buf = header_bytes(&alignment);
  Out o(buf);
  for (const Tensor& t : tensors_) {
    o.bytes(t.data.data(), t.data.size());
    o.pad_to(alignment);  // every tensor, the last one too, is padded
  }
  return buf;
}

void GgufWriter::write(const std::string& path) const {
  uint64_t alignment = 0;
  const std::vector<uint8_t> header = header_bytes(&alignment);
  const std::string tmp = strformat("%s.tmp.%d", path.c_str(), static_cast<int>(::getpid()));
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) raise(Status::Io, "cannot create '%s': %s", tmp.c_str(), std::strerror(errno));
  // Streams the tensors from the writer's copies (no second copy of the data).
  static const uint8_t zeros[256] = {};
  uint64_t pos = header.size();
  bool ok = std::fwrite(header.data(), 1, header.size(), f) == header.size();
  for (const Tensor& t : tensors_) {
    if (!ok) break;
    ok = std::fwrite(t.data.data(), 1, t.data.size(), f) == t.data.size();
    pos += t.data.size();
    for (uint64_t pad = align_up(pos, alignment) - pos; ok && pad > 0;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(pad, sizeof(zeros)));
      ok = std::fwrite(zeros, 1, n, f) == n;
      pad -= n;
      pos += n;
    }
  }
  const int write_errno = errno;
  if (std::fclose(f) != 0 || !ok) {
    const int e = ok ? errno : write_errno;
    std::remove(tmp.c_str());
    raise(Status::Io, "cannot write '%s': %s", tmp.c_str(), std::strerror(e));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    raise(Status::Io, "cannot rename '%s' to '%s': %s", tmp.c_str(), path.c_str(), std::strerror(e));
  }
}

}  // namespace infer
