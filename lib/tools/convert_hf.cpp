#include "tools/convert_hf.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "core/threadpool.h"
#include "gguf/gguf.h"
#include "gguf/gguf_stream.h"
#include "hf/hf.h"
#include "model/model.h"
#include "quant/dequant.h"
#include "quant/formats.h"

namespace infer {

namespace {

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// Runs the loader (Model::load: the GGUF reader's checks, the metadata and
// shapes the architecture reads, tensor types, the vocabulary, finite
// weights) on `path`; its refusal is rethrown with `what` in front.
std::unique_ptr<Model> load_checked(const std::string& path, const char* what) {
  try {
    return Model::load(path);
  } catch (const Error& e) {
    raise(e.status(), "%s: %s", what, e.what());
  }
}

// The file being written, removed unless it was renamed into place: a refused
// or failed conversion leaves nothing behind at the output path (nor beside it).
struct TempOutput {
  std::string path;
  bool keep = false;
  explicit TempOutput(const std::string& out) : path(out + ".unchecked." + std::to_string(::getpid())) {}
  ~TempOutput() {
    if (!keep) std::remove(path.c_str());
  }
};

QuantizeStats write_gguf(const GgufFile& view, const std::string& out_path, const ConvertHfOptions& o);

}  // namespace

// The output is what the loader accepts, or nothing. The directory is loaded
// first, by the loader itself (the view convert reads is the one Model::load
// builds), so whatever it would refuse is refused before anything is
// written. The file is then written under a temporary name and loaded again
// before it takes the output's name, since converting can make a loadable
// view unloadable (a BF16 weight beyond F16's range becomes Inf, say).
QuantizeStats convert_hf(const std::string& dir, const std::string& out_path, const ConvertHfOptions& o) {
  if (!o.keep_types && !can_quantize(o.type)) raise(Status::InvalidArgument, "cannot convert to %s", dtype_name(o.type));
  if (!hf::is_directory(dir)) raise(Status::InvalidArgument, "'%s' is not a directory", dir.c_str());
  QuantizeStats st;
  {
    const std::unique_ptr<Model> model =
        load_checked(dir, strformat("'%s' would not load, so it is not converted", dir.c_str()).c_str());
    TempOutput tmp(out_path);
    st = write_gguf(model->gguf(), tmp.path, o);
    load_checked(tmp.path, "the converted file would not load, so it is not written");
    if (std::rename(tmp.path.c_str(), out_path.c_str()) != 0)
      raise(Status::Io, "cannot rename '%s' to '%s': %s", tmp.path.c_str(), out_path.c_str(), std::strerror(errno));
    tmp.keep = true;
  }
  if (o.progress) o.progress(1.0, "done");
  return st;
}

namespace {

QuantizeStats write_gguf(const GgufFile& view, const std::string& out_path, const ConvertHfOptions& o) {
  const GgufFile* in = &view;
  const std::string arch = in->get_string("general.architecture").value_or("");
  const int64_t n_head = in->get_int(arch + ".attention.head_count").value_or(0);
  // (Hybrids such as Jamba store head_count_kv per layer, an array: nothing
  // of theirs is permuted.)
  const GgufValue* kv = in->find(arch + ".attention.head_count_kv");
  const int64_t n_head_kv = kv && kv->is_integer() ? kv->as_int() : n_head;
  const int64_t n_embd = in->get_int(arch + ".embedding_length").value_or(0);
  const int64_t hd = in->get_int(arch + ".attention.key_length").value_or(n_head > 0 ? n_embd / n_head : 0);
  const int64_t n_rot = in->get_int(arch + ".rope.dimension_count").value_or(hd);
  // Permute Q/K into the interleaved layout when the whole head rotates.
  const bool permute = in->get_bool("infer.rope.neox").value_or(false) && n_rot == hd && hd > 0 && hd % 2 == 0;
  ThreadPool pool(o.n_threads);
  QuantizeStats st;
  GgufStreamWriter w(out_path);
  for (const auto& [k, v] : in->metadata()) {
    if (permute && k == "infer.rope.neox") continue;
    w.set(k, v);
  }
  if (!o.keep_types) write_quant_metadata(w, o.type, QuantMethod::Rtn);
  struct Item {
    const GgufTensorInfo* t;
    DType out;
    bool convert;
    int64_t heads;  // > 0: rows permuted, in groups of this many heads
    std::vector<int32_t> perm;  // act-order columns to put back in input order (converted rows only)
  };
  // Act-order GPTQ matrices come with "<name>.perm" (their input permutation,
  // a libinfer extension). Kept as they are, both are written; converted,
  // the rows are put back in input order and the file is an ordinary GGUF.
  auto perm_base = [&](const GgufTensorInfo& t) -> const GgufTensorInfo* {
    if (!ends_with(t.name, ".perm")) return nullptr;
    return in->find_tensor(t.name.substr(0, t.name.size() - 5));
  };
  std::vector<Item> items;
  int64_t n_unpermuted = 0;
  for (const GgufTensorInfo& t : in->tensors()) {
    if (const GgufTensorInfo* base = perm_base(t); base && !o.keep_types && is_quantizable(base->name, base->dims))
      continue;  // applied to the base's rows below
    Item it{&t, t.type, false, 0, {}};
    if (permute && (ends_with(t.name, ".attn_q.weight") || ends_with(t.name, ".attn_q.bias"))) it.heads = n_head;
    if (permute && (ends_with(t.name, ".attn_k.weight") || ends_with(t.name, ".attn_k.bias"))) it.heads = n_head_kv;
    if (it.heads > 0 && (t.dims.size() == 2 ? t.dims[1] : t.dims[0]) != it.heads * hd)
      raise(Status::Format, "%s: %lld rows are not %lld heads of %lld", t.name.c_str(),
            (long long)(t.dims.size() == 2 ? t.dims[1] : t.dims[0]), (long long)it.heads, (long long)hd);
    if (!o.keep_types && is_quantizable(t.name, t.dims)) {
      if (const GgufTensorInfo* p = in->find_tensor(t.name + ".perm")) {
        if (p->type != DType::I32 || p->n_elements() != t.dims[0])
          raise(Status::Format, "%s.perm is not an i32 permutation of %lld inputs", t.name.c_str(), (long long)t.dims[0]);
        it.perm.resize(static_cast<size_t>(t.dims[0]));
        std::memcpy(it.perm.data(), in->tensor_data(*p), it.perm.size() * 4);
        std::vector<uint8_t> seen(it.perm.size(), 0);
        for (int32_t v : it.perm)
          if (v < 0 || v >= t.dims[0] || seen[static_cast<size_t>(v)]++)
            raise(Status::Format, "%s.perm is not a permutation of its %lld inputs", t.name.c_str(), (long long)t.dims[0]);
        ++n_unpermuted;
      }
      bool fb = false;
      it.out = tensor_type(o.type, t.dims[0], &fb);
      it.convert = true;
      ++st.n_quantized;
      if (fb) {
        ++st.n_fallback;
        if (o.note)
          o.note(strformat("%s: rows of %lld values do not fit %s blocks: written as %s", t.name.c_str(),
                           (long long)t.dims[0], dtype_name(o.type), dtype_name(it.out)));
      }
    }
    declare_tensor(w, t.name, t.dims, it.out);
    st.bytes_in += t.nbytes;
    ++st.n_tensors;
    items.push_back(it);
  }
  if (n_unpermuted > 0 && o.note)
    o.note(strformat("%lld act-order matrices: columns put back in input order (no .perm tensors written)",
                     (long long)n_unpermuted));
  w.begin();
  uint64_t done = 0;
  for (const Item& it : items) {
    const GgufTensorInfo& t = *it.t;
    if (o.progress) o.progress(static_cast<double>(done) / std::max<uint64_t>(1, st.bytes_in), t.name);
    // Row r of the output is source row src_row(r).
    const bool vec = t.dims.size() == 1;
    const int64_t n = vec ? 1 : t.dims[0], rows = vec ? t.dims[0] : t.n_rows();
    const size_t rb = vec ? dtype_info(t.type)->bytes : dtype_row_bytes(t.type, n);
    auto src_row = [&](int64_t r) -> int64_t {
      if (it.heads == 0) return r;
      const int64_t h = r / hd, c = r % hd, j = c / 2, i = c % 2;
      return h * hd + i * (hd / 2) + j;  // GGUF row h*hd + 2j + i <- HF row h*hd + i*hd/2 + j
    };
    const uint8_t* src = in->tensor_data(t);
    if (!it.convert) {
      if (it.heads == 0) {
        w.write(src, t.nbytes);
      } else {
        std::vector<uint8_t> buf(t.nbytes);
        for (int64_t r = 0; r < rows; ++r) std::memcpy(&buf[r * rb], src + src_row(r) * rb, rb);
        w.write(buf.data(), buf.size());
      }
      st.bytes_out += t.nbytes;
    } else {
      if (it.out == DType::W8A8) raise(Status::Unsupported, "w8a8 output is not supported by convert hf");
      const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(rows, (int64_t(64) << 20) / (4 * n)));
      std::vector<float> buf, tmp;
      for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
        const int64_t r1 = std::min(rows, r0 + chunk);
        buf.resize(static_cast<size_t>((r1 - r0) * n));
        for (int64_t r = r0; r < r1; ++r) {
          float* row = &buf[(r - r0) * n];
          dequantize_row(t.type, src + src_row(r) * rb, row, n);
          if (!it.perm.empty()) {  // column j is input perm[j]
            tmp.assign(row, row + n);
            for (int64_t j = 0; j < n; ++j) row[it.perm[static_cast<size_t>(j)]] = tmp[static_cast<size_t>(j)];
          }
        }
        write_rows(w, it.out, buf.data(), r1 - r0, n, nullptr, &pool);
      }
      st.bytes_out += dtype_row_bytes(it.out, n) * rows;
    }
    done += t.nbytes;
  }
  w.finish();
  return st;
}

}  // namespace

}  // namespace infer
