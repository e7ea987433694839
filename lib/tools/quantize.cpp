#include "tools/quantize.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "core/threadpool.h"
#include "gguf/gguf.h"
#include "gguf/gguf_stream.h"
#include "quant/dequant.h"
#include "quant/formats.h"
#include "tools/calibrated.h"

namespace infer {

const char* quant_method_name(QuantMethod m) {
  switch (m) {
    case QuantMethod::Rtn: return "rtn";
    case QuantMethod::Gptq: return "gptq";
    case QuantMethod::Awq: return "awq";
  }
  return "?";
}

bool is_quantizable(const std::string& name, const std::vector<int64_t>& dims) {
  auto ends_with = [&](const char* s) {
    const size_t n = std::strlen(s);
    return name.size() >= n && name.compare(name.size() - n, n, s) == 0;
  };
  // Encoders' token-type and position tables are added to the embedding
  // rows, not multiplied: they stay F32 as in converted files (other GGUF
  // readers add them as they are and refuse a quantized one).
  if (name == "token_types.weight" || name == "position_embd.weight") return false;
  // Mamba's convolution taps (d_conv values per channel) are read as f32 by
  // the conv, not multiplied by a matmul; they stay as they are, as the
  // peer's quantizer leaves them. ssm_a and ssm_d have no .weight suffix.
  if (name.find("ssm_conv1d") != std::string::npos) return false;
  return dims.size() == 2 && ends_with(".weight") && name.find("norm") == std::string::npos &&
         name.find("rope_freqs") == std::string::npos;
}

DType tensor_type(DType want, int64_t n_in, bool* fell_back) {
  const DType t = want == DType::W8A8 ? want : fallback_type(want, n_in);
  if (fell_back) *fell_back = t != want;
  return t;
}

DType requested_type(const QuantizeOptions& o, const std::string& name, bool has_output) {
  if (name == "output.weight" || (!has_output && name == "token_embd.weight")) {
    if (o.output_type) return *o.output_type;
  }
  if (name == "token_embd.weight" && o.embd_type) return *o.embd_type;
  return o.type;
}

void declare_tensor(GgufStreamWriter& w, const std::string& name, const std::vector<int64_t>& dims, DType t) {
  w.add_tensor(name, dims, t);
  if (t == DType::W8A8) {
    int64_t rows = 1;  // one scale per row; a 3-D tensor (MoE experts) has dims[1] * dims[2] rows
    for (size_t i = 1; i < dims.size(); ++i) rows *= dims[i];
    w.add_tensor(name + ".scale", {rows}, DType::F32);
  }
}

void write_rows(GgufStreamWriter& w, DType t, const float* src, int64_t n_rows, int64_t n_in, float* scales,
                ThreadPool* pool) {
  const size_t rb = t == DType::W8A8 ? static_cast<size_t>(n_in) : dtype_row_bytes(t, n_in);
  std::vector<uint8_t> out(rb * static_cast<size_t>(n_rows));
  auto rows = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      if (t == DType::W8A8)
        quantize_row_w8a8(src + r * n_in, reinterpret_cast<int8_t*>(out.data() + r * rb), &scales[r], n_in);
      else
        quantize_row(t, src + r * n_in, out.data() + r * rb, n_in);
    }
  };
  if (pool && n_rows >= 2 * pool->size()) {
    pool->run([&](int tid, int nth) { rows(n_rows * tid / nth, n_rows * (tid + 1) / nth); });
  } else {
    rows(0, n_rows);
  }
  w.write(out.data(), out.size());
}

void write_quant_metadata(GgufStreamWriter& w, DType want, QuantMethod method) {
  w.set("general.quantization_version", GgufValue::make_u32(2));
  const int ft = llama_file_type(want);
  if (ft >= 0) w.set("general.file_type", GgufValue::make_u32(static_cast<uint32_t>(ft)));
  if (dtype_is_infer_own(want)) {
    w.set("infer.quant.version", GgufValue::make_u32(1));
    w.set("infer.quant.type", GgufValue::make_string(want == DType::W8A8 ? "w8a8" : "int4"));
    if (want != DType::W8A8) w.set("infer.quant.group_size", GgufValue::make_u32(dtype_info(want)->block));
  }
  if (dtype_is_infer_own(want) || method != QuantMethod::Rtn)
    w.set("infer.quant.method", GgufValue::make_string(quant_method_name(method)));
}

// ---- reading source weights as f32 ---------------------------------------------------

void source_rows_f32(const GgufFile& in, const GgufTensorInfo& t, int64_t r0, int64_t r1, float* dst) {
  const int64_t n = t.dims[0];
  const uint8_t* data = in.tensor_data(t);
  if (t.type == DType::W8A8) {
    const GgufTensorInfo* s = in.find_tensor(t.name + ".scale");
    if (!s || s->type != DType::F32 || s->n_elements() != t.n_rows())
      raise(Status::Format, "w8a8 tensor '%s' has no scales", t.name.c_str());
    const float* sc = reinterpret_cast<const float*>(in.tensor_data(*s));
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t k = 0; k < n; ++k)
        dst[(r - r0) * n + k] = static_cast<float>(static_cast<int8_t>(data[r * n + k])) * sc[r];
    return;
  }
  const size_t rb = dtype_row_bytes(t.type, n);
  for (int64_t r = r0; r < r1; ++r) dequantize_row(t.type, data + r * rb, dst + (r - r0) * n, n);
}

namespace {

bool is_scale_companion(const GgufFile& in, const GgufTensorInfo& t) {
  const std::string& n = t.name;
  if (n.size() < 7 || n.compare(n.size() - 6, 6, ".scale") != 0) return false;
  const GgufTensorInfo* base = in.find_tensor(n.substr(0, n.size() - 6));
  return base && base->type == DType::W8A8;
}

void copy_metadata(const GgufFile& in, GgufStreamWriter& w) {
  for (const auto& [k, v] : in.metadata()) {
    if (k == "general.file_type" || k == "general.quantization_version" || k.rfind("infer.quant.", 0) == 0) continue;
    w.set(k, v);
  }
}

QuantizeStats quantize_rtn(const GgufFile& in, const std::string& out_path, const QuantizeOptions& o,
                           ThreadPool& pool) {
  QuantizeStats st;
  GgufStreamWriter w(out_path);
  copy_metadata(in, w);
  write_quant_metadata(w, o.type, QuantMethod::Rtn);
  struct Item {
    const GgufTensorInfo* t;
    DType out;
    bool quantize;
  };
  std::vector<Item> items;
  const bool has_output = in.find_tensor("output.weight") != nullptr;
  for (const GgufTensorInfo& t : in.tensors()) {
    if (is_scale_companion(in, t)) continue;
    // Mixtral-style MoE: the 3-D expert stacks (*_exps) are matrices too
    // (rows of every expert in turn); the router is left as it is, as
    // published files leave it (routing is discrete: rounding its logits can
    // send a token to other experts).
    const bool experts = t.dims.size() == 3 && t.name.find("_exps.weight") != std::string::npos;
    const bool router = t.name.find("ffn_gate_inp.weight") != std::string::npos;
    Item it{&t, t.type, (is_quantizable(t.name, t.dims) || experts) && !router};
    if (it.quantize) {
      bool fb = false;
      const DType want = requested_type(o, t.name, has_output);
      it.out = tensor_type(want, t.dims[0], &fb);
      if (fb) {
        ++st.n_fallback;
        if (o.note)
          o.note(strformat("%s: rows of %lld values do not fit %s blocks: written as %s", t.name.c_str(),
                           (long long)t.dims[0], dtype_name(want), dtype_name(it.out)));
      }
      ++st.n_quantized;
    } else if (t.type == DType::W8A8) {
      raise(Status::Unsupported, "tensor '%s' is w8a8 but not a weight matrix", t.name.c_str());
    }
    declare_tensor(w, t.name, t.dims, it.out);
    st.bytes_in += t.nbytes;
    ++st.n_tensors;
    items.push_back(it);
  }
  w.begin();
  uint64_t done = 0;
  std::vector<float> buf, scales;
  for (const Item& it : items) {
    const GgufTensorInfo& t = *it.t;
    if (o.progress) o.progress(static_cast<double>(done) / std::max<uint64_t>(1, st.bytes_in), t.name);
    if (!it.quantize) {
      w.write(in.tensor_data(t), t.nbytes);
      st.bytes_out += t.nbytes;
    } else {
      const int64_t n = t.dims[0], rows = t.n_rows();
      const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(rows, (int64_t(64) << 20) / (4 * n)));
      if (it.out == DType::W8A8) scales.resize(static_cast<size_t>(rows));
      for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
        const int64_t r1 = std::min(rows, r0 + chunk);
        buf.resize(static_cast<size_t>((r1 - r0) * n));
        source_rows_f32(in, t, r0, r1, buf.data());
        write_rows(w, it.out, buf.data(), r1 - r0, n, it.out == DType::W8A8 ? scales.data() + r0 : nullptr, &pool);
      }
      if (it.out == DType::W8A8) w.write(scales.data(), scales.size() * 4);
      st.bytes_out += (it.out == DType::W8A8 ? static_cast<uint64_t>(n) * rows + 4 * rows
                                              : dtype_row_bytes(it.out, n) * rows);
    }
    done += t.nbytes;
  }
  w.finish();
  if (o.progress) o.progress(1.0, "done");
  return st;
}

}  // namespace

QuantizeStats quantize_model(const std::string& in_path, const std::string& out_path, const QuantizeOptions& o) {
  for (const std::optional<DType>& t : {std::optional<DType>(o.type), o.output_type, o.embd_type})
    if (t && (!dtype_info(*t) || (*t != DType::W8A8 && !can_quantize(*t))))
      raise(Status::InvalidArgument, "cannot quantize to %s", dtype_name(*t));
  if (in_path == out_path) raise(Status::InvalidArgument, "the output must be a different file from the input");
  if (o.method != QuantMethod::Rtn && ((o.output_type && *o.output_type == DType::W8A8) || (o.embd_type && *o.embd_type == DType::W8A8)))
    raise(Status::Unsupported, "%s writes the output head and the token embedding round-to-nearest in a block "
          "format; w8a8 is not one", quant_method_name(o.method));
  ThreadPool pool(o.n_threads);
  if (o.method == QuantMethod::Rtn) {
    std::unique_ptr<GgufFile> in = GgufFile::open(in_path);
    return quantize_rtn(*in, out_path, o, pool);
  }
  if (!grid_supported(o.type))
    raise(Status::Unsupported, "%s needs a format with one grid per block (q8_0, q4_0, q4_1, q5_0, q5_1, int4); "
          "%s is not one", quant_method_name(o.method), dtype_name(o.type));
  if (o.calib_text.empty()) raise(Status::InvalidArgument, "%s needs calibration text", quant_method_name(o.method));
  return quantize_calibrated(in_path, out_path, o, pool);
}

}  // namespace infer
