#include "model/moe.h"

#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tls.h"
#include "gguf/gguf.h"

namespace infer {

namespace {

// The tensor `name` with dims exactly `want`, of a type the matmul runs.
const GgufTensorInfo& find_checked(const GgufFile& g, const std::string& name, const std::vector<int64_t>& want,
                                   int32_t n_expert) {
  const GgufTensorInfo* t = g.find_tensor(name);
  if (!t) raise(Status::Format, "tensor '%s' is missing (the model declares %d experts)", name.c_str(), n_expert);
  if (t->dims != want)
    raise(Status::Format, "tensor '%s' has shape %s, expected %s", name.c_str(), gguf_dims_text(t->dims).c_str(),
          gguf_dims_text(want).c_str());
  if ((!dtype_can_dequantize(t->type) && t->type != DType::W8A8) || !dtype_row_ok(t->type, want[0]))
    raise(Status::Unsupported, "tensor '%s' has type %s, which this build cannot compute with", name.c_str(),
          dtype_name(t->type));
  // Act-order input permutations (lib/hf/hf_quant.cpp) are applied by the
  // dense layers only; the HF loader never writes them for these tensors.
  if (g.find_tensor(name + ".perm"))
    raise(Status::Unsupported, "tensor '%s' has an input permutation ('%s.perm'), which mixture-of-experts tensors "
          "do not support", name.c_str(), name.c_str());
  return *t;
}

// The per-row scales of a W8A8 tensor of `rows` rows ("<name>.scale").
const float* w8a8_scales(const GgufFile& g, const std::string& name, int64_t rows) {
  const GgufTensorInfo* s = g.find_tensor(name + ".scale");
  if (!s || s->type != DType::F32 || s->n_elements() != rows)
    raise(Status::Format, "w8a8 tensor '%s' needs its scales '%s.scale' (f32, %lld values)", name.c_str(),
          name.c_str(), (long long)rows);
  return reinterpret_cast<const float*>(g.tensor_data(*s));
}

// Expert slices of the 3-D tensor `name`, dims [n_in, n_out, n_expert].
std::vector<WeightView> bind_experts(const GgufFile& g, const std::string& name, int64_t n_in, int64_t n_out,
                                     int32_t n_expert, const std::function<WeightCache*()>& new_cache) {
  const GgufTensorInfo& t = find_checked(g, name, {n_in, n_out, n_expert}, n_expert);
  const uint8_t* data = g.tensor_data(t);
  const float* scales = t.type == DType::W8A8 ? w8a8_scales(g, name, n_out * n_expert) : nullptr;
  std::vector<WeightView> out(static_cast<size_t>(n_expert));
  for (int32_t e = 0; e < n_expert; ++e) {
    WeightView& w = out[static_cast<size_t>(e)];
    w.type = t.type;
    w.n_in = n_in;
    w.n_out = n_out;
    w.row_bytes = t.type == DType::W8A8 ? static_cast<size_t>(n_in) : dtype_row_bytes(t.type, n_in);
    w.data = data + static_cast<size_t>(e) * static_cast<size_t>(n_out) * w.row_bytes;
    if (scales) w.scale = scales + static_cast<size_t>(e) * static_cast<size_t>(n_out);
    w.cache = new_cache();  // each slice is a weight of its own for the backend's repacked copies
  }
  return out;
}

}  // namespace

void MoeFfn::for_each_weight(const std::function<void(const WeightView&)>& fn) const {
  if (empty()) return;
  fn(router);
  for (const auto* v : {&gate, &up, &down})
    for (const WeightView& w : *v) fn(w);
}

void check_moe_counts(int64_t n_expert, int64_t n_used) {
  if (n_expert < 1 || n_expert > 4096)
    raise(Status::Format, "expert_count %lld is out of range [1, 4096]", (long long)n_expert);
  if (n_used < 1 || n_used > n_expert)
    raise(Status::Format, "expert_used_count %lld is out of range [1, expert_count = %lld]", (long long)n_used,
          (long long)n_expert);
}

MoeFfn bind_moe_ffn(const GgufFile& g, const std::string& prefix, int64_t n_embd, int64_t n_ff, int32_t n_expert,
                    int32_t n_used, const std::function<WeightCache*()>& new_cache) {
  check_moe_counts(n_expert, n_used);
  MoeFfn f;
  f.n_expert = n_expert;
  f.n_used = n_used;
  f.n_embd = n_embd;
  f.n_ff = n_ff;
  const std::string rname = prefix + "ffn_gate_inp.weight";
  const GgufTensorInfo& r = find_checked(g, rname, {n_embd, n_expert}, n_expert);
  f.router.type = r.type;
  f.router.n_in = n_embd;
  f.router.n_out = n_expert;
  f.router.data = g.tensor_data(r);
  f.router.row_bytes = r.type == DType::W8A8 ? static_cast<size_t>(n_embd) : dtype_row_bytes(r.type, n_embd);
  if (r.type == DType::W8A8) f.router.scale = w8a8_scales(g, rname, n_expert);
  f.router.cache = new_cache();
  f.gate = bind_experts(g, prefix + "ffn_gate_exps.weight", n_embd, n_ff, n_expert, new_cache);
  f.up = bind_experts(g, prefix + "ffn_up_exps.weight", n_embd, n_ff, n_expert, new_cache);
  f.down = bind_experts(g, prefix + "ffn_down_exps.weight", n_ff, n_embd, n_expert, new_cache);
  return f;
}

void moe_route(const float* logits, int64_t m, int n_expert, int k, int32_t* sel, float* weight, bool renormalize) {
  // Reused per thread: the forward pass does not allocate once warmed up.
  struct Scratch {
    std::vector<float> p;
    std::vector<int32_t> idx;
  };
  static thread_local Scratch* slot = nullptr;
  Scratch& sc = tls_object(slot);
  std::vector<float>& p = sc.p;
  std::vector<int32_t>& idx = sc.idx;
  p.resize(static_cast<size_t>(n_expert));
  idx.resize(static_cast<size_t>(n_expert));
  for (int64_t t = 0; t < m; ++t) {
    const float* l = logits + t * n_expert;
    // Softmax over all experts (the published definition), then the top k.
    float mx = l[0];
    for (int e = 1; e < n_expert; ++e) mx = std::max(mx, l[e]);
    float sum = 0.0f;
    for (int e = 0; e < n_expert; ++e) sum += p[e] = std::exp(l[e] - mx);
    for (int e = 0; e < n_expert; ++e) {
      p[e] /= sum;
      idx[e] = e;
    }
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float ksum = 0.0f;
    for (int i = 0; i < k; ++i) ksum += p[idx[i]];
    if (!renormalize) ksum = 1.0f;
    for (int i = 0; i < k; ++i) {
      sel[t * k + i] = idx[i];
      weight[t * k + i] = p[idx[i]] / ksum;
    }
  }
}

namespace {
// Slots of the block's buffers (from slot0).
enum : int { kRouter = 0, kXs, kG, kU, kY, kAcc };
template <typename T>
T* grow(std::vector<T>& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
  return v.data();
}
}  // namespace

void moe_reserve(const MoeFfn& f, BackendWorkspace& ws, int slot0, int64_t m, MoeHostScratch& host) {
  const int64_t E = f.n_expert, k = f.n_used, d = f.n_embd, ff = f.n_ff;
  grow(host.logits, m * E);
  grow(host.wts, m * k);
  grow(host.row_w, m);
  grow(host.sel, m * k);
  grow(host.rows, m);
  ws.output(slot0 + kRouter, host.logits.data(), sizeof(float) * static_cast<size_t>(m * E));
  ws.get<float>(slot0 + kXs, m * d);
  ws.get<float>(slot0 + kG, m * ff);
  ws.get<float>(slot0 + kU, m * ff);
  ws.get<float>(slot0 + kY, m * d);
  ws.get<float>(slot0 + kAcc, m * d);
}

void moe_ffn_forward(const MoeFfn& f, Backend& be, BackendWorkspace& ws, int slot0, const float* h, int64_t m,
                     float* out, MoeHostScratch& host) {
  const int64_t E = f.n_expert, k = f.n_used, d = f.n_embd, ff = f.n_ff;
  float* logits = grow(host.logits, m * E);  // host: [m][E]
  float* wts = grow(host.wts, m * k);        // host: [m][k]
  float* row_w = grow(host.row_w, m);        // host: weight of each gathered row
  int32_t* sel = grow(host.sel, m * k);      // host: [m][k]
  int32_t* rows = grow(host.rows, m);        // host: token of each gathered row
  float* xs = ws.get<float>(slot0 + kXs, m * d);  // backend: the rows routed to one expert
  float* g = ws.get<float>(slot0 + kG, m * ff);
  float* u = ws.get<float>(slot0 + kU, m * ff);
  float* y = ws.get<float>(slot0 + kY, m * d);
  float* acc = ws.get<float>(slot0 + kAcc, m * d);  // the sum, copied to out at the end (out may be h)

  // Routing is discrete: a last-bit difference in a router logit can send a
  // token to another expert, so the logits must not depend on the rest of
  // the batch. The backend's matmul rows are batch invariant in every format
  // (tests/test_batch_invariance.cpp); tests/test_moe.cpp checks whole
  // sequences alone against batched.
  const size_t lbytes = sizeof(float) * static_cast<size_t>(m * E);
  float* dlogits = static_cast<float*>(ws.output(slot0 + kRouter, logits, lbytes));
  be.matmul(f.router, h, m, dlogits);
  ws.download(logits, dlogits, lbytes);  // the edge: routing runs on the host
  moe_route(logits, m, static_cast<int>(E), static_cast<int>(k), sel, wts, f.renormalize);
  be.zero(acc, m * d);
  for (int64_t e = 0; e < E; ++e) {
    // The tokens routed to e, in batch order (a token selects e at most once).
    int64_t n = 0;
    for (int64_t t = 0; t < m; ++t)
      for (int64_t i = 0; i < k; ++i)
        if (sel[t * k + i] == e) {
          rows[n] = static_cast<int32_t>(t);
          row_w[n++] = wts[t * k + i];
        }
    if (n == 0) continue;  // decode reads only the routed experts' weights
    // Every token routed here: the rows are h itself, in order.
    const float* x = h;
    if (n < m) {
      be.gather_rows(h, rows, n, d, xs);
      x = xs;
    }
    const size_t se = static_cast<size_t>(e);
    be.matmul(f.gate[se], x, n, g);
    be.matmul(f.up[se], x, n, u);
    be.swiglu(g, u, g, n * ff);
    be.matmul(f.down[se], g, n, y);
    // Each token's sum runs over its experts in increasing index order,
    // whatever the rest of the batch: the same bits alone or batched.
    be.scatter_add_rows(acc, rows, row_w, y, n, d);
  }
  be.copy(out, acc, m * d);
}

}  // namespace infer
