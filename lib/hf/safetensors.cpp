// The safetensors container: header checks.
#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "hf/hf.h"
#include "core/json.h"

namespace infer {
namespace hf {

namespace {

struct DtypeFacts {
  const char* name;
  uint32_t bytes;
  bool supported;
  DType type;
};

const DtypeFacts kDtypes[] = {
    {"F32", 4, true, DType::F32},    {"F16", 2, true, DType::F16},    {"BF16", 2, true, DType::BF16},
    {"F64", 8, true, DType::F64},    {"I8", 1, true, DType::I8},      {"I16", 2, true, DType::I16},
    {"I32", 4, true, DType::I32},    {"I64", 8, true, DType::I64},    {"U8", 1, false, DType::F32},
    {"BOOL", 1, false, DType::F32},  {"U16", 2, false, DType::F32},   {"U32", 4, false, DType::F32},
    {"U64", 8, false, DType::F32},   {"F8_E4M3", 1, false, DType::F32}, {"F8_E5M2", 1, false, DType::F32},
};

// The header may not be larger than this (the format's own limit is 100 MB).
constexpr uint64_t kMaxHeader = uint64_t(100) << 20;

}  // namespace

std::vector<SafeTensor> parse_safetensors(const uint8_t* data, size_t size, const std::string& what) {
  const char* w = what.c_str();
  if (size < 8) raise(Status::Format, "%s: not a safetensors file (%zu bytes, shorter than its header length)", w, size);
  uint64_t n = 0;
  for (int k = 7; k >= 0; --k) n = (n << 8) | data[k];
  if (n > kMaxHeader || n > size - 8)
    raise(Status::Format, "%s: safetensors header length %llu does not fit the file (%zu bytes)", w,
          (unsigned long long)n, size);
  const uint64_t data_start = 8 + n;
  const uint64_t data_size = size - data_start;
  // The header may be padded with trailing spaces (the writers align the data).
  std::string_view text(reinterpret_cast<const char*>(data) + 8, static_cast<size_t>(n));
  const std::string label = what + " (safetensors header)";
  const Json hdr = Json::parse(text, label.c_str());
  if (!hdr.is_object()) raise(Status::Format, "%s: the safetensors header is not a JSON object", w);
  std::vector<SafeTensor> out;
  for (const auto& [name, t] : hdr.members()) {
    if (name == "__metadata__") continue;
    const char* nm = name.c_str();
    if (name.empty()) raise(Status::Format, "%s: a tensor has an empty name", w);
    if (!t.is_object()) raise(Status::Format, "%s: tensor '%s' is not described by an object", w, nm);
    const Json* dt = t.find("dtype");
    const Json* shape = t.find("shape");
    const Json* offs = t.find("data_offsets");
    if (!dt || !dt->is_string()) raise(Status::Format, "%s: tensor '%s' has no dtype string", w, nm);
    if (!shape || !shape->is_array()) raise(Status::Format, "%s: tensor '%s' has no shape array", w, nm);
    if (!offs || !offs->is_array() || offs->items().size() != 2)
      raise(Status::Format, "%s: tensor '%s' has no data_offsets [begin, end]", w, nm);
    SafeTensor st;
    st.name = name;
    st.dtype = dt->as_string();
    const DtypeFacts* f = nullptr;
    for (const DtypeFacts& d : kDtypes)
      if (st.dtype == d.name) f = &d;
    if (!f) raise(Status::Format, "%s: tensor '%s' has an unknown dtype '%s'", w, nm, st.dtype.c_str());
    st.supported = f->supported;
    st.type = f->type;
    if (shape->items().size() > 8) raise(Status::Format, "%s: tensor '%s' has %zu dimensions", w, nm, shape->items().size());
    uint64_t count = 1;
    for (const Json& d : shape->items()) {
      if (!d.is_int() || d.as_int() < 0)
        raise(Status::Format, "%s: tensor '%s' has a dimension that is not a non-negative integer", w, nm);
      const uint64_t x = static_cast<uint64_t>(d.as_int());
      if (x != 0 && count > data_size / x)
        raise(Status::Format, "%s: tensor '%s' is larger than the file's data", w, nm);
      count *= x;
      st.shape.push_back(d.as_int());
    }
    const Json& b = offs->items()[0];
    const Json& e = offs->items()[1];
    if (!b.is_int() || !e.is_int() || b.as_int() < 0 || e.as_int() < b.as_int())
      raise(Status::Format, "%s: tensor '%s' has data_offsets that are not 0 <= begin <= end", w, nm);
    const uint64_t begin = static_cast<uint64_t>(b.as_int()), end = static_cast<uint64_t>(e.as_int());
    if (end > data_size)
      raise(Status::Format, "%s: tensor '%s' ends at %llu, past the data section (%llu bytes)", w, nm,
            (unsigned long long)end, (unsigned long long)data_size);
    if (count > data_size / f->bytes || end - begin != count * f->bytes)
      raise(Status::Format, "%s: tensor '%s' holds %llu bytes but its shape and dtype %s need %llu", w, nm,
            (unsigned long long)(end - begin), st.dtype.c_str(), (unsigned long long)(count * f->bytes));
    st.begin = data_start + begin;
    st.end = data_start + end;
    out.push_back(std::move(st));
  }
  // Names are unique (a JSON object may repeat a key) and ranges disjoint.
  std::vector<const SafeTensor*> order;
  for (const SafeTensor& t : out) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const SafeTensor* a, const SafeTensor* b) { return a->name < b->name; });
  for (size_t k = 1; k < order.size(); ++k)
    if (order[k]->name == order[k - 1]->name)
      raise(Status::Format, "%s: tensor '%s' is listed twice", w, order[k]->name.c_str());
  std::sort(order.begin(), order.end(), [](const SafeTensor* a, const SafeTensor* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  for (size_t k = 1; k < order.size(); ++k)
    if (order[k]->begin < order[k - 1]->end)
      raise(Status::Format, "%s: tensors '%s' and '%s' overlap", w, order[k - 1]->name.c_str(), order[k]->name.c_str());
  return out;
}

}  // namespace hf
}  // namespace infer
