// GPTQ and AWQ for llama-architecture models.
//
// The calibration forward is a plain f32 transcription of the llama layer
// (model/llama.cpp) over all calibration tokens at once: X is the residual
// stream [tokens][dim]; sequences are windows of the calibration text, each
// starting with BOS, attended causally within themselves. Rotary frequencies
// use the base and linear scaling only (rope-scaling variants change the
// calibration activations negligibly).
//
// Layers are processed in order; each sees the residual stream produced by
// the already-quantized layers before it, as in both papers' reference
// implementations. Inside a layer GPTQ goes "true-sequential": q/k/v, then o
// (its input computed with the quantized q/k/v), then gate/up, then down.
#include "tools/calibrated.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <cstdlib>
#include <map>
#include <numeric>

#include "core/error.h"
#include "core/threadpool.h"
#include "gguf/gguf.h"
#include "gguf/gguf_stream.h"
#include "model/model.h"
#include "quant/formats.h"

namespace infer {

namespace {

using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vec = Eigen::VectorXf;

// ---- f32 forward pieces -------------------------------------------------------------------

Mat read_matrix(const GgufFile& in, const std::string& name) {
  const GgufTensorInfo* t = in.find_tensor(name);
  if (!t || t->dims.size() != 2) raise(Status::Format, "tensor '%s' is missing or not a matrix", name.c_str());
  Mat m(t->dims[1], t->dims[0]);
  source_rows_f32(in, *t, 0, t->dims[1], m.data());
  return m;
}

Vec read_vector(const GgufFile& in, const std::string& name, int64_t n) {
  const GgufTensorInfo* t = in.find_tensor(name);
  if (!t || t->n_elements() != n) raise(Status::Format, "tensor '%s' is missing or has the wrong size", name.c_str());
  Vec v(n);
  source_rows_f32(in, *t, 0, 1, v.data());
  return v;
}

Mat rms_norm(const Mat& x, const Vec& w, float eps) {
  Mat y(x.rows(), x.cols());
  for (Eigen::Index i = 0; i < x.rows(); ++i) {
    const float ss = x.row(i).squaredNorm() / static_cast<float>(x.cols());
    y.row(i) = x.row(i).cwiseProduct(w.transpose()) * (1.0f / std::sqrt(ss + eps));
  }
  return y;
}

// Y = X · Wᵀ
Mat linear(const Mat& x, const Mat& w) { return x * w.transpose(); }

struct Seq {
  int64_t start, len;
};

struct Calib {
  ModelConfig c;
  std::vector<Seq> seqs;
  std::vector<int32_t> pos;      // position of each calibration token in its sequence
  std::vector<float> inv_freq;
};

// Interleaved rotary pairs (2i, 2i+1), as llama GGUF files store Q and K.
void rope(const Calib& cb, Mat& x, int n_heads) {
  const int hd = cb.c.head_dim, half = cb.c.n_rot / 2;
  for (Eigen::Index t = 0; t < x.rows(); ++t) {
    const float p = static_cast<float>(cb.pos[t]) * cb.c.rope_pos_scale;
    for (int i = 0; i < half; ++i) {
      const float th = p * cb.inv_freq[i], cs = std::cos(th), sn = std::sin(th);
      for (int h = 0; h < n_heads; ++h) {
        float* v = x.row(t).data() + h * hd;
        const int a = cb.c.rope_neox ? i : 2 * i, b = cb.c.rope_neox ? i + half : 2 * i + 1;
        const float va = v[a], vb = v[b];
        v[a] = va * cs - vb * sn;
        v[b] = va * sn + vb * cs;
      }
    }
  }
}

// Causal attention within each sequence; GQA maps head h to kv head h / group.
Mat attention(const Calib& cb, const Mat& q, const Mat& k, const Mat& v) {
  const int hd = cb.c.head_dim, nh = cb.c.n_head, group = cb.c.n_head / cb.c.n_head_kv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  Mat out = Mat::Zero(q.rows(), q.cols());
  std::vector<float> s;
  for (const Seq& sq : cb.seqs) {
    for (int h = 0; h < nh; ++h) {
      const int kh = h / group;
      for (int64_t i = 0; i < sq.len; ++i) {
        const int64_t ti = sq.start + i;
        s.resize(static_cast<size_t>(i + 1));
        float mx = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          const int64_t tj = sq.start + j;
          float d = 0;
          for (int e = 0; e < hd; ++e) d += q(ti, h * hd + e) * k(tj, kh * hd + e);
          s[j] = d * scale;
          mx = std::max(mx, s[j]);
        }
        float sum = 0;
        for (int64_t j = 0; j <= i; ++j) sum += (s[j] = std::exp(s[j] - mx));
        for (int64_t j = 0; j <= i; ++j) {
          const float pj = s[j] / sum;
          const int64_t tj = sq.start + j;
          for (int e = 0; e < hd; ++e) out(ti, h * hd + e) += pj * v(tj, kh * hd + e);
        }
      }
    }
  }
  return out;
}

Mat swiglu(const Mat& g, const Mat& u) {
  Mat s(g.rows(), g.cols());
  for (Eigen::Index i = 0; i < g.size(); ++i) {
    const float x = g.data()[i];
    s.data()[i] = x / (1.0f + std::exp(-x)) * u.data()[i];
  }
  return s;
}

// ---- quantized weights ----------------------------------------------------------------------

struct QWeight {
  DType type = DType::F32;
  std::vector<uint8_t> bytes;  // the encoded rows
  Mat deq;                     // what they dequantize to (feeds the next forward)
};

// Plain (non-grid) encoding for tensors that fell back to another type.
QWeight encode_plain(const Mat& w, DType t) {
  QWeight q;
  q.type = t;
  const size_t rb = dtype_row_bytes(t, w.cols());
  q.bytes.resize(rb * w.rows());
  q.deq = w;
  std::vector<float> tmp(static_cast<size_t>(w.cols()));
  for (Eigen::Index r = 0; r < w.rows(); ++r) quantize_row(t, w.row(r).data(), q.bytes.data() + r * rb, w.cols());
  return q;
}

// RTN on the format's grid; clip[r * groups + g] shrinks each block's range (AWQ).
QWeight encode_grid(const Mat& w, DType t, const std::vector<float>* clip) {
  QWeight q;
  q.type = t;
  const int G = static_cast<int>(dtype_info(t)->block), bb = static_cast<int>(dtype_info(t)->bytes);
  const int64_t groups = w.cols() / G;
  q.bytes.resize(static_cast<size_t>(w.rows() * groups * bb));
  q.deq.resize(w.rows(), w.cols());
  std::vector<int> qi(static_cast<size_t>(G));
  for (Eigen::Index r = 0; r < w.rows(); ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const float* x = w.row(r).data() + g * G;
      const Grid gr = grid_for_block(t, x, clip ? (*clip)[r * groups + g] : 1.0f);
      for (int i = 0; i < G; ++i) {
        qi[i] = gr.quantize(x[i]);
        q.deq(r, g * G + i) = gr.value(qi[i]);
      }
      encode_block(t, gr, qi.data(), q.bytes.data() + (r * groups + g) * bb);
    }
  }
  return q;
}

// ---- GPTQ -----------------------------------------------------------------------------------

// Quantizes W [n_out][n_in] given the input Hessian H [n_in][n_in] (GPTQ,
// Frantar et al. 2022): columns in order (or by decreasing H diagonal with
// act_order), each rounded on its block's grid, the rounding error spread
// over the remaining columns through the Cholesky factor of H⁻¹; updates
// inside a block of `B` columns are immediate, to the rest batched.
QWeight gptq(const Mat& w_in, Eigen::MatrixXd H, DType t, const QuantizeOptions& o) {
  const int64_t n_out = w_in.rows(), n = w_in.cols();
  const int G = static_cast<int>(dtype_info(t)->block), bb = static_cast<int>(dtype_info(t)->bytes);
  const int64_t groups = n / G;
  Eigen::MatrixXf W = w_in;  // column-major: column updates are contiguous
  for (int64_t i = 0; i < n; ++i) {
    if (H(i, i) == 0) {  // an input that never fires: its column cannot matter
      H(i, i) = 1;
      W.col(i).setZero();
    }
  }
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  std::vector<Grid> grids(static_cast<size_t>(n_out * groups));
  if (o.act_order) {
    std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return H(a, a) > H(b, b); });
    // Static groups: grids from the original weights (columns leave group order).
    std::vector<float> x(static_cast<size_t>(G));
    for (int64_t r = 0; r < n_out; ++r)
      for (int64_t g = 0; g < groups; ++g) {
        for (int i = 0; i < G; ++i) x[i] = W(r, g * G + i);
        grids[r * groups + g] = grid_for_block(t, x.data());
      }
    Eigen::MatrixXf Wp(n_out, n);
    Eigen::MatrixXd Hp(n, n);
    for (int64_t j = 0; j < n; ++j) {
      Wp.col(j) = W.col(perm[j]);
      for (int64_t i = 0; i < n; ++i) Hp(i, j) = H(perm[i], perm[j]);
    }
    W = std::move(Wp);
    H = std::move(Hp);
  }
  const double damp = o.gptq_damp * H.diagonal().mean();
  H.diagonal().array() += damp;
  // U: upper Cholesky factor of H⁻¹.
  Eigen::LLT<Eigen::MatrixXd> llt(H);
  if (llt.info() != Eigen::Success) raise(Status::Internal, "GPTQ: the damped Hessian is not positive definite");
  const Eigen::MatrixXd Hinv = llt.solve(Eigen::MatrixXd::Identity(n, n));
  Eigen::LLT<Eigen::MatrixXd> llt2(Hinv);
  if (llt2.info() != Eigen::Success) raise(Status::Internal, "GPTQ: H⁻¹ is not positive definite");
  const Eigen::MatrixXf U = Eigen::MatrixXd(llt2.matrixU()).cast<float>();

  std::vector<int8_t> Q(static_cast<size_t>(n_out * n));  // q of column j (permuted order)
  Eigen::MatrixXf Wq(n_out, n);
  const int64_t B = std::max<int64_t>(G, (o.gptq_block / G) * G);  // whole groups per batch
  std::vector<float> x(static_cast<size_t>(G));
  for (int64_t i1 = 0; i1 < n; i1 += B) {
    const int64_t i2 = std::min(n, i1 + B), count = i2 - i1;
    Eigen::MatrixXf W1 = W.middleCols(i1, count);
    Eigen::MatrixXf Err(n_out, count);
    for (int64_t i = 0; i < count; ++i) {
      const int64_t col = i1 + i, orig = perm[col], g = orig / G;
      if (!o.act_order && col % G == 0) {  // the grid of each row's new group, from the updated weights
        for (int64_t r = 0; r < n_out; ++r) {
          for (int k = 0; k < G; ++k) x[k] = W1(r, i + k);
          grids[r * groups + g] = grid_for_block(t, x.data());
        }
      }
      const float d = U(col, col);
      for (int64_t r = 0; r < n_out; ++r) {
        const Grid& gr = grids[r * groups + g];
        const int qv = gr.quantize(W1(r, i));
        Q[r * n + col] = static_cast<int8_t>(qv);
        Wq(r, col) = gr.value(qv);
        Err(r, i) = (W1(r, i) - Wq(r, col)) / d;
      }
      if (i + 1 < count)
        W1.rightCols(count - i - 1).noalias() -= Err.col(i) * U.block(col, col + 1, 1, count - i - 1);
    }
    if (i2 < n) W.rightCols(n - i2).noalias() -= Err * U.block(i1, i2, count, n - i2);
  }

  QWeight out;
  out.type = t;
  out.bytes.resize(static_cast<size_t>(n_out * groups * bb));
  out.deq.resize(n_out, n);
  std::vector<int> qi(static_cast<size_t>(G));
  std::vector<int64_t> where(static_cast<size_t>(n));  // original column -> permuted position
  for (int64_t j = 0; j < n; ++j) where[perm[j]] = j;
  for (int64_t r = 0; r < n_out; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      for (int k = 0; k < G; ++k) {
        const int64_t j = where[g * G + k];
        qi[k] = Q[r * n + j];
        out.deq(r, g * G + k) = Wq(r, j);
      }
      encode_block(t, grids[r * groups + g], qi.data(), out.bytes.data() + (r * groups + g) * bb);
    }
  }
  return out;
}

Eigen::MatrixXd hessian(const Mat& x) {
  Eigen::MatrixXd h = (x.transpose() * x).cast<double>();
  return h * (2.0 / static_cast<double>(std::max<Eigen::Index>(1, x.rows())));
}

// ---- AWQ ------------------------------------------------------------------------------------

// Up to `cap` evenly spaced rows of x (the search works on a sample).
Mat sample_rows(const Mat& x, int64_t cap) {
  if (x.rows() <= cap) return x;
  Mat s(cap, x.cols());
  for (int64_t i = 0; i < cap; ++i) s.row(i) = x.row(i * x.rows() / cap);
  return s;
}

// Per-input-channel scales for the weights ws that share input x: s =
// mean|x|^α, normalised, α from a grid, choosing the least output error of
// the quantized, scaled weights (Lin et al. 2023).
Vec awq_scales(const Mat& x_full, const std::vector<const Mat*>& ws, DType t, int grid) {
  const Mat x = sample_rows(x_full, 512);
  const Eigen::Index n = x.cols();
  Vec mean_abs = x.cwiseAbs().colwise().mean().transpose();
  std::vector<Mat> ref;
  for (const Mat* w : ws) ref.push_back(linear(x, *w));
  double best = INFINITY;
  Vec best_s = Vec::Ones(n);
  for (int a = 0; a < grid; ++a) {
    const float alpha = static_cast<float>(a) / static_cast<float>(grid);
    Vec s = mean_abs.array().max(1e-6f).pow(alpha);
    s /= std::sqrt(s.maxCoeff() * s.minCoeff());
    double err = 0;
    for (size_t j = 0; j < ws.size(); ++j) {
      const Mat scaled = ws[j]->array().rowwise() * s.transpose().array();
      Mat deq = encode_grid(scaled, t, nullptr).deq;
      deq.array().rowwise() /= s.transpose().array();
      err += (linear(x, deq) - ref[j]).squaredNorm();
    }
    if (err < best) {
      best = err;
      best_s = s;
    }
  }
  return best_s;
}

// Per (row, block) clipping ratio minimising δᵀ H_g δ, δ the block's rounding error.
std::vector<float> awq_clip(const Mat& w, const Mat& x_full, DType t) {
  const Mat x = sample_rows(x_full, 1024);
  const int G = static_cast<int>(dtype_info(t)->block);
  const int64_t groups = w.cols() / G;
  std::vector<float> clip(static_cast<size_t>(w.rows() * groups), 1.0f);
  std::vector<float> delta(static_cast<size_t>(G));
  for (int64_t g = 0; g < groups; ++g) {
    const Eigen::MatrixXf Hg = x.middleCols(g * G, G).transpose() * x.middleCols(g * G, G);
    for (Eigen::Index r = 0; r < w.rows(); ++r) {
      const float* v = w.row(r).data() + g * G;
      double best = INFINITY;
      for (int c = 0; c <= 10; ++c) {
        const float ratio = 1.0f - 0.05f * static_cast<float>(c);
        const Grid gr = grid_for_block(t, v, ratio);
        for (int i = 0; i < G; ++i) delta[i] = v[i] - gr.value(gr.quantize(v[i]));
        const Eigen::Map<const Eigen::VectorXf> d(delta.data(), G);
        const double e = d.dot(Hg * d);
        if (e < best) {
          best = e;
          clip[r * groups + g] = ratio;
        }
      }
    }
  }
  return clip;
}

// ---- the layer loop --------------------------------------------------------------------------

struct LayerW {
  Vec attn_norm, ffn_norm;
  Mat wq, wk, wv, wo, wg, wu, wd;
};

const char* const kMats[] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};

}  // namespace

QuantizeStats quantize_calibrated(const std::string& in_path, const std::string& out_path, const QuantizeOptions& o,
                                  ThreadPool& pool) {
  std::unique_ptr<Model> model = Model::load(in_path);
  const GgufFile& in = model->gguf();
  Calib cb;
  cb.c = model->config();
  const ModelConfig& c = cb.c;
  if (c.arch != "llama" && c.arch != "mistral")
    raise(Status::Unsupported, "%s supports llama-architecture models", quant_method_name(o.method));
  // The calibration forward reads the matrices' columns in input order; an
  // act-order checkpoint's permuted INT4 rows ("<name>.perm") are not that.
  for (const GgufTensorInfo& t : in.tensors())
    if (t.name.size() > 5 && t.name.compare(t.name.size() - 5, 5, ".perm") == 0)
      raise(Status::Unsupported, "%s calibration does not take act-order weights with input permutations ('%s'); "
            "quantize the original float model instead", quant_method_name(o.method), t.name.c_str());
  for (int i = 0; i < c.n_rot / 2; ++i)
    cb.inv_freq.push_back(1.0f / std::pow(c.rope_freq_base, static_cast<float>(2 * i) / static_cast<float>(c.n_rot)));

  // Calibration windows: BOS + up to calib_ctx - 1 tokens each.
  const std::vector<int32_t> ids = model->tokenizer().encode(o.calib_text, false);
  const int32_t bos = model->tokenizer().vocab().bos;
  std::vector<int32_t> toks;
  const size_t win = static_cast<size_t>(std::max(2, o.calib_ctx) - 1);
  for (size_t s = 0; s < ids.size() && static_cast<int>(toks.size()) + 2 <= o.max_calib_tokens; s += win) {
    const size_t e = std::min({ids.size(), s + win, s + static_cast<size_t>(o.max_calib_tokens) - toks.size() - 1});
    Seq sq{static_cast<int64_t>(toks.size()), 0};
    if (bos >= 0) toks.push_back(bos);
    toks.insert(toks.end(), ids.begin() + s, ids.begin() + e);
    sq.len = static_cast<int64_t>(toks.size()) - sq.start;
    cb.seqs.push_back(sq);
    for (int64_t i = 0; i < sq.len; ++i) cb.pos.push_back(static_cast<int32_t>(i));
  }
  if (toks.size() < 2) raise(Status::InvalidArgument, "the calibration text has too few tokens");
  if (o.note)
    o.note(strformat("%s: %zu calibration tokens in %zu windows", quant_method_name(o.method), toks.size(),
                     cb.seqs.size()));

  QuantizeStats st;
  GgufStreamWriter w(out_path);
  for (const auto& [k, v] : in.metadata()) {
    if (k == "general.file_type" || k == "general.quantization_version" || k.rfind("infer.quant.", 0) == 0) continue;
    w.set(k, v);
  }
  write_quant_metadata(w, o.type, o.method);

  // Declared order: tensors outside the layers first (written at once, RTN
  // for the matrices), then each layer's tensors as the layer is finished.
  auto layer_of = [](const std::string& name) -> int {
    if (name.rfind("blk.", 0) != 0) return -1;
    return std::atoi(name.c_str() + 4);
  };
  std::vector<std::vector<const GgufTensorInfo*>> by_layer(static_cast<size_t>(c.n_layer));
  std::vector<const GgufTensorInfo*> outside;
  for (const GgufTensorInfo& t : in.tensors()) {
    st.bytes_in += t.nbytes;
    const int l = layer_of(t.name);
    if (l >= 0 && l < c.n_layer) by_layer[l].push_back(&t);
    else outside.push_back(&t);
  }
  const bool has_output = in.find_tensor("output.weight") != nullptr;
  auto out_type = [&](const GgufTensorInfo& t) {
    if (!is_quantizable(t.name, t.dims)) return t.type;
    bool fb = false;
    const DType want = requested_type(o, t.name, has_output);
    const DType ot = tensor_type(want, t.dims[0], &fb);
    if (fb) {
      ++st.n_fallback;
      if (o.note)
        o.note(strformat("%s: rows of %lld values do not fit %s blocks: written as %s (round-to-nearest)",
                         t.name.c_str(), (long long)t.dims[0], dtype_name(want), dtype_name(ot)));
    }
    ++st.n_quantized;
    return ot;
  };
  std::map<std::string, DType> types;
  for (const GgufTensorInfo* t : outside) declare_tensor(w, t->name, t->dims, types[t->name] = out_type(*t));
  for (auto& layer : by_layer)
    for (const GgufTensorInfo* t : layer) declare_tensor(w, t->name, t->dims, types[t->name] = out_type(*t));
  st.n_tensors = static_cast<int64_t>(in.tensors().size());
  w.begin();

  auto write_as_is_or_rtn = [&](const GgufTensorInfo& t) {
    const DType ot = types[t.name];
    if (!is_quantizable(t.name, t.dims) && ot == t.type) {
      w.write(in.tensor_data(t), t.nbytes);
      st.bytes_out += t.nbytes;
      return;
    }
    const Mat m = read_matrix(in, t.name);
    write_rows(w, ot, m.data(), m.rows(), m.cols(), nullptr, &pool);
    st.bytes_out += dtype_row_bytes(ot, m.cols()) * m.rows();
  };
  for (const GgufTensorInfo* t : outside) write_as_is_or_rtn(*t);

  // The residual stream of every calibration token.
  const Mat embd = read_matrix(in, "token_embd.weight");
  Mat X(static_cast<Eigen::Index>(toks.size()), c.n_embd);
  for (size_t i = 0; i < toks.size(); ++i) X.row(static_cast<Eigen::Index>(i)) = embd.row(toks[i]);

  for (int l = 0; l < c.n_layer; ++l) {
    if (o.progress) o.progress(static_cast<double>(l) / c.n_layer, strformat("layer %d/%d", l + 1, c.n_layer));
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerW L;
    L.attn_norm = read_vector(in, p + "attn_norm.weight", c.n_embd);
    L.ffn_norm = read_vector(in, p + "ffn_norm.weight", c.n_embd);
    Mat* mats[] = {&L.wq, &L.wk, &L.wv, &L.wo, &L.wg, &L.wu, &L.wd};
    for (int i = 0; i < 7; ++i) *mats[i] = read_matrix(in, p + kMats[i] + ".weight");
    auto grid_ok = [&](const char* name) { return grid_supported(types[p + name + ".weight"]); };
    std::map<std::string, QWeight> done;

    if (o.method == QuantMethod::Awq) {
      // Float forward of this layer for its inputs, then scales folded in.
      const Mat h1 = rms_norm(X, L.attn_norm, c.rms_eps);
      Mat q = linear(h1, L.wq), k = linear(h1, L.wk), v = linear(h1, L.wv);
      rope(cb, q, c.n_head);
      rope(cb, k, c.n_head_kv);
      const Mat A = attention(cb, q, k, v);
      const Mat X2 = X + linear(A, L.wo);
      const Mat h3 = rms_norm(X2, L.ffn_norm, c.rms_eps);
      const Mat S = swiglu(linear(h3, L.wg), linear(h3, L.wu));
      const DType tq = types[p + "attn_q.weight"];
      if (grid_ok("attn_q") && grid_ok("attn_k") && grid_ok("attn_v")) {
        const Vec s = awq_scales(h1, {&L.wq, &L.wk, &L.wv}, tq, o.awq_grid);
        L.attn_norm.array() /= s.array();
        for (Mat* m : {&L.wq, &L.wk, &L.wv}) m->array().rowwise() *= s.transpose().array();
      }
      if (grid_ok("attn_output")) {
        // o's input channels come from v's output channels; heads that share
        // a kv head share the scale of its channels.
        const int hd = c.head_dim, group = c.n_head / c.n_head_kv;
        Mat Akv = Mat::Zero(A.rows(), static_cast<Eigen::Index>(c.n_head_kv) * hd);
        for (int h = 0; h < c.n_head; ++h) Akv.middleCols((h / group) * hd, hd) += A.middleCols(h * hd, hd).cwiseAbs();
        // Search with the tied scales expanded to o's columns.
        const Mat wo_orig = L.wo;
        Vec s_kv = Akv.cwiseAbs().colwise().mean().transpose();
        double best = INFINITY;
        Vec best_s = Vec::Ones(s_kv.size());
        const Mat xs = sample_rows(A, 512);
        const Mat ref = linear(xs, wo_orig);
        for (int a = 0; a < o.awq_grid; ++a) {
          Vec s = s_kv.array().max(1e-6f).pow(static_cast<float>(a) / static_cast<float>(o.awq_grid));
          s /= std::sqrt(s.maxCoeff() * s.minCoeff());
          Vec s_full(A.cols());
          for (int h = 0; h < c.n_head; ++h) s_full.segment(h * hd, hd) = s.segment((h / group) * hd, hd);
          const Mat scaled = wo_orig.array().rowwise() * s_full.transpose().array();
          Mat deq = encode_grid(scaled, types[p + "attn_output.weight"], nullptr).deq;
          deq.array().rowwise() /= s_full.transpose().array();
          const double err = (linear(xs, deq) - ref).squaredNorm();
          if (err < best) {
            best = err;
            best_s = s;
          }
        }
        for (int kh = 0; kh < c.n_head_kv; ++kh)
          for (int e = 0; e < hd; ++e) L.wv.row(kh * hd + e) /= best_s[kh * hd + e];
        for (int h = 0; h < c.n_head; ++h)
          for (int e = 0; e < hd; ++e) L.wo.col(h * hd + e) *= best_s[(h / group) * hd + e];
      }
      if (grid_ok("ffn_gate") && grid_ok("ffn_up")) {
        const Vec s = awq_scales(h3, {&L.wg, &L.wu}, types[p + "ffn_gate.weight"], o.awq_grid);
        L.ffn_norm.array() /= s.array();
        for (Mat* m : {&L.wg, &L.wu}) m->array().rowwise() *= s.transpose().array();
      }
      if (grid_ok("ffn_down")) {
        const Vec s = awq_scales(S, {&L.wd}, types[p + "ffn_down.weight"], o.awq_grid);
        for (Eigen::Index j = 0; j < s.size(); ++j) L.wu.row(j) /= s[j];
        L.wd.array().rowwise() *= s.transpose().array();
      }
      // Inputs of the scaled layer (float), for the clipping search.
      const Mat g1 = rms_norm(X, L.attn_norm, c.rms_eps);
      Mat q2 = linear(g1, L.wq), k2 = linear(g1, L.wk);
      const Mat v2 = linear(g1, L.wv);
      rope(cb, q2, c.n_head);
      rope(cb, k2, c.n_head_kv);
      const Mat A2 = attention(cb, q2, k2, v2);
      const Mat g3 = rms_norm(X + linear(A2, L.wo), L.ffn_norm, c.rms_eps);
      const Mat S2 = swiglu(linear(g3, L.wg), linear(g3, L.wu));
      const Mat* inputs[] = {&g1, &g1, &g1, &A2, &g3, &g3, &S2};
      for (int i = 0; i < 7; ++i) {
        const DType t = types[p + kMats[i] + ".weight"];
        if (grid_supported(t)) {
          const std::vector<float> clip = awq_clip(*mats[i], *inputs[i], t);
          done[kMats[i]] = encode_grid(*mats[i], t, &clip);
        } else {
          done[kMats[i]] = encode_plain(*mats[i], t);
        }
      }
      // The next layer's input, through the quantized layer.
      const Mat f1 = rms_norm(X, L.attn_norm, c.rms_eps);
      Mat q3 = linear(f1, done["attn_q"].deq), k3 = linear(f1, done["attn_k"].deq);
      const Mat v3 = linear(f1, done["attn_v"].deq);
      rope(cb, q3, c.n_head);
      rope(cb, k3, c.n_head_kv);
      X += linear(attention(cb, q3, k3, v3), done["attn_output"].deq);
      const Mat f3 = rms_norm(X, L.ffn_norm, c.rms_eps);
      X += linear(swiglu(linear(f3, done["ffn_gate"].deq), linear(f3, done["ffn_up"].deq)), done["ffn_down"].deq);
    } else {  // GPTQ, true-sequential
      auto quant = [&](const char* name, const Mat& wm, const Mat& x) {
        const DType t = types[p + name + ".weight"];
        done[name] = grid_supported(t) ? gptq(wm, hessian(x), t, o) : encode_plain(wm, t);
      };
      const Mat h1 = rms_norm(X, L.attn_norm, c.rms_eps);
      quant("attn_q", L.wq, h1);
      quant("attn_k", L.wk, h1);
      quant("attn_v", L.wv, h1);
      Mat q = linear(h1, done["attn_q"].deq), k = linear(h1, done["attn_k"].deq);
      const Mat v = linear(h1, done["attn_v"].deq);
      rope(cb, q, c.n_head);
      rope(cb, k, c.n_head_kv);
      const Mat A = attention(cb, q, k, v);
      quant("attn_output", L.wo, A);
      X += linear(A, done["attn_output"].deq);
      const Mat h3 = rms_norm(X, L.ffn_norm, c.rms_eps);
      quant("ffn_gate", L.wg, h3);
      quant("ffn_up", L.wu, h3);
      const Mat S = swiglu(linear(h3, done["ffn_gate"].deq), linear(h3, done["ffn_up"].deq));
      quant("ffn_down", L.wd, S);
      X += linear(S, done["ffn_down"].deq);
    }

    // Write the layer's tensors in their declared order.
    for (const GgufTensorInfo* t : by_layer[l]) {
      const std::string suffix = t->name.substr(p.size());
      const std::string base = suffix.size() > 7 ? suffix.substr(0, suffix.size() - 7) : suffix;  // minus ".weight"
      auto it = done.find(base);
      if (it != done.end()) {
        w.write(it->second.bytes.data(), it->second.bytes.size());
        st.bytes_out += it->second.bytes.size();
      } else if (suffix == "attn_norm.weight" || suffix == "ffn_norm.weight") {
        // (AWQ may have folded scales into the norm: write the f32 values in the tensor's type.)
        const Vec& nv = suffix == "attn_norm.weight" ? L.attn_norm : L.ffn_norm;
        std::vector<uint8_t> bytes(t->nbytes);
        quantize_row(t->type, nv.data(), bytes.data(), nv.size());
        w.write(bytes.data(), bytes.size());
        st.bytes_out += bytes.size();
      } else {
        write_as_is_or_rtn(*t);
      }
    }
  }
  w.finish();
  if (o.progress) o.progress(1.0, "done");
  return st;
}

}  // namespace infer
