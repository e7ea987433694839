// Rank 0's announcements and the followers' loop (tp.h).
//
// A message is two broadcasts from rank 0: a fixed header (what, and how
// many int32 values follow), then the payload. A pass's payload:
//   tokens, pos, slot, logit_rows, types   (the Batch; types may be empty)
//   tables: for each sequence of the batch, slot, n, then n block ids
//   copies: 4 values each (dst tier, dst, src tier, src), in the cache's order
//   skip:   n_layer flags, or none
#include "model/tp.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "core/log.h"
#include "kv/kv_cache.h"
#include "model/model.h"

namespace infer {

namespace {

constexpr uint32_t kMagic = 0x54504731;  // "TPG1"
enum Kind : uint32_t { kKv = 1, kPass = 2, kStop = 3 };

struct Header {
  uint32_t magic = kMagic;
  uint32_t kind = 0;
  int64_t n_payload = 0;  // int32 values that follow
  // Pass: counts of the batch's arrays and flags.
  int64_t n_tokens = 0, n_logit_rows = 0, n_types = 0, n_tables = 0, n_copies = 0, n_skip = 0;
  int32_t encode = 0, rank_head = 0;
};

}  // namespace

TpGroup::TpGroup(std::shared_ptr<Communicator> comm) : comm_(std::move(comm)) {
  if (!comm_) raise(Status::InvalidArgument, "tensor parallelism without a communicator");
}

void TpGroup::check(Status s) {
  if (s == Status::Ok) return;
  failed_ = true;
  // The group cannot go on: a rank is gone or stuck mid-pass. Rank 0 ends
  // the job, saying why (an MPI group: the launcher stops every rank, so a
  // server does not stay up answering errors); the followers' callers end
  // theirs from the Error (follow_engine). A communicator without a job to
  // end (one process's threads) returns from abort: the Error then goes up.
  if (leader()) {
    std::fprintf(stderr, "libinfer: rank 0: %s; ending the job\n", comm_->last_error().c_str());
    std::fflush(stderr);
    comm_->abort(1);
  }
  throw Error(s, comm_->last_error());
}

void TpGroup::claim_engine() {
  if (engine_)
    raise(Status::InvalidArgument, "a tensor-parallel model runs one engine at a time (its ranks follow that one)");
  engine_ = true;
}

void TpGroup::agree(uint64_t value, const char* what) const {
  const int n = size();
  std::vector<uint64_t> all(static_cast<size_t>(n));
  const Status s = comm_->all_gather(&value, sizeof value, all.data());
  if (s != Status::Ok) throw Error(s, comm_->last_error());
  for (int r = 1; r < n; ++r)
    if (all[static_cast<size_t>(r)] != all[0])
      raise(Status::InvalidArgument,
            "tensor-parallel ranks disagree on %s: rank %d's differs from rank 0's (%016llx vs %016llx); every rank "
            "must be started with the same model file and the same parameters",
            what, r, static_cast<unsigned long long>(all[static_cast<size_t>(r)]),
            static_cast<unsigned long long>(all[0]));
}

void TpGroup::send(uint32_t kind, const std::vector<int32_t>& payload) {
  Header h;
  h.kind = kind;
  h.n_payload = static_cast<int64_t>(payload.size());
  check(comm_->broadcast(&h, sizeof h, 0));
  if (!payload.empty())
    check(comm_->broadcast(const_cast<int32_t*>(payload.data()), sizeof(int32_t) * payload.size(), 0));
}

void TpGroup::announce_kv(const KvLayout& l) {
  if (!leader()) raise(Status::Internal, "announce_kv on rank %d", rank());
  copies_.clear();
  send(kKv, {l.n_layers, l.n_kv_heads, l.head_dim, l.block_size, l.n_blocks, l.n_host_blocks,
             static_cast<int32_t>(l.type)});
}

void TpGroup::record_copy(KvTier dst_tier, int dst_block, KvTier src_tier, int src_block) {
  copies_.push_back({static_cast<int32_t>(dst_tier), dst_block, static_cast<int32_t>(src_tier), src_block});
}

void TpGroup::announce_pass(const Batch& b, const KvCache* kv, const uint8_t* skip, int n_layer, bool encode,
                            bool rank_head) {
  if (!leader()) return;
  if (failed_) raise(Status::Backend, "tensor parallel: the group failed earlier: %s", comm_->last_error().c_str());
  std::vector<int32_t>& m = msg_;
  m.clear();
  Header h;
  h.kind = kPass;
  h.n_tokens = static_cast<int64_t>(b.size());
  h.n_logit_rows = static_cast<int64_t>(b.logit_rows.size());
  h.n_types = static_cast<int64_t>(b.types.size());
  h.encode = encode;
  h.rank_head = rank_head;
  m.insert(m.end(), b.tokens.begin(), b.tokens.end());
  m.insert(m.end(), b.pos.begin(), b.pos.end());
  m.insert(m.end(), b.slot.begin(), b.slot.end());
  m.insert(m.end(), b.logit_rows.begin(), b.logit_rows.end());
  m.insert(m.end(), b.types.begin(), b.types.end());
  if (kv) {
    // The table of every sequence of the batch (its tokens are contiguous
    // runs; a slot seen before is not sent again).
    for (size_t t = 0; t < b.size(); ++t) {
      const int32_t slot = b.slot[t];
      if (t > 0 && b.slot[t - 1] == slot) continue;
      bool seen = false;
      for (size_t u = 0; u < t && !seen; ++u) seen = b.slot[u] == slot;
      if (seen || !kv->has_sequence(slot)) continue;
      const std::vector<int32_t>& table = kv->block_table(slot);
      m.push_back(slot);
      m.push_back(static_cast<int32_t>(table.size()));
      m.insert(m.end(), table.begin(), table.end());
      ++h.n_tables;
    }
  }
  h.n_copies = static_cast<int64_t>(copies_.size());
  for (const Copy& c : copies_) m.insert(m.end(), {c.dst_tier, c.dst, c.src_tier, c.src});
  copies_.clear();
  if (skip) {
    h.n_skip = n_layer;
    for (int l = 0; l < n_layer; ++l) m.push_back(skip[l]);
  }
  h.n_payload = static_cast<int64_t>(m.size());
  check(comm_->broadcast(&h, sizeof h, 0));
  if (!m.empty()) check(comm_->broadcast(m.data(), sizeof(int32_t) * m.size(), 0));
}

void TpGroup::announce_stop() {
  if (!leader() || failed_) return;
  send(kStop, {});
}

void TpGroup::follow(const Model& model, Backend& be) {
  if (leader()) raise(Status::InvalidArgument, "rank 0 runs the engine; only ranks 1..N-1 follow it");
  const ModelConfig& c = model.config();
  Workspace ws;
  std::unique_ptr<KvCache> kv;
  std::vector<int32_t> m;
  std::vector<float> out;
  std::vector<uint8_t> skip;
  Batch b;
  const int64_t timeout = comm_->timeout_ms();
  for (;;) {
    Header h;
    // Between passes a follower waits as long as rank 0 idles (a server may
    // idle for hours); within a message, the pass's timeout holds.
    comm_->set_timeout_ms(0);
    const Status hs = comm_->broadcast(&h, sizeof h, 0);
    comm_->set_timeout_ms(timeout);
    check(hs);
    if (h.magic != kMagic || h.n_payload < 0 || h.n_payload > (int64_t{1} << 31))
      raise(Status::Internal, "tensor parallel: rank %d received a malformed message from rank 0", rank());
    m.resize(static_cast<size_t>(h.n_payload));
    if (!m.empty()) check(comm_->broadcast(m.data(), sizeof(int32_t) * m.size(), 0));
    if (h.kind == kStop) return;
    if (h.kind == kKv) {
      if (m.size() != 7) raise(Status::Internal, "tensor parallel: a KV announcement of %zu values", m.size());
      KvLayout l = model.kv_layout();
      if (m[0] != l.n_layers || m[1] != l.n_kv_heads || m[2] != l.head_dim)
        raise(Status::Internal, "tensor parallel: rank 0's KV shape (%d layers, %d heads of %d) is not this rank's "
              "(%d, %d, %d)", m[0], m[1], m[2], l.n_layers, l.n_kv_heads, l.head_dim);
      l.block_size = m[3];
      l.n_blocks = m[4];
      l.n_host_blocks = m[5];
      l.type = static_cast<KvType>(m[6]);
      kv.reset();
      kv = std::make_unique<KvCache>(l, [&be](const KvLayout& lay, int n, KvTier tier) {
        return be.make_kv_memory(lay, n, tier);
      });
      continue;
    }
    if (h.kind != kPass) raise(Status::Internal, "tensor parallel: unknown message %u from rank 0", h.kind);
    // Unpack the pass.
    const int64_t nt = h.n_tokens, nl = h.n_logit_rows, ny = h.n_types;
    if (nt < 0 || nl < 0 || ny < 0 || 3 * nt + nl + ny > h.n_payload)
      raise(Status::Internal, "tensor parallel: a malformed pass from rank 0");
    const int32_t* p = m.data();
    const auto take = [&p](std::vector<int32_t>& v, int64_t n) {
      v.assign(p, p + n);
      p += n;
    };
    take(b.tokens, nt);
    take(b.pos, nt);
    take(b.slot, nt);
    take(b.logit_rows, nl);
    take(b.types, ny);
    const int32_t* end = m.data() + m.size();
    for (int64_t i = 0; i < h.n_tables; ++i) {
      if (end - p < 2 || p[1] < 0 || end - p - 2 < p[1] || !kv)
        raise(Status::Internal, "tensor parallel: a malformed block table from rank 0");
      kv->mirror_table(p[0], p + 2, p[1]);
      p += 2 + p[1];
    }
    if (end - p < 4 * h.n_copies + h.n_skip) raise(Status::Internal, "tensor parallel: a malformed pass from rank 0");
    for (int64_t i = 0; i < h.n_copies; ++i, p += 4) {
      if (!kv) raise(Status::Internal, "tensor parallel: a KV copy before the KV cache");
      kv->mirror_copy(static_cast<KvTier>(p[0]), p[1], static_cast<KvTier>(p[2]), p[3]);
    }
    skip.assign(p, p + h.n_skip);
    try {
      if (h.encode) {
        const int64_t width = h.rank_head ? c.n_cls_out : c.n_embd;
        out.resize(static_cast<size_t>(std::max<int64_t>(1, nl * width)));
        model.encode(b, be, ws, out.data(), h.rank_head != 0);
      } else {
        if (!kv) raise(Status::Internal, "tensor parallel: a pass before the KV cache");
        out.resize(static_cast<size_t>(std::max<int64_t>(1, nl * c.n_vocab)));
        model.forward(b, *kv, be, ws, out.data(), skip.empty() ? nullptr : skip.data());
      }
    } catch (const Error& e) {
      // A broken group ends the follower; a pass that failed before any
      // collective failed alike on rank 0 (the same batch), which goes on.
      if (failed_) throw;
      log(LogLevel::Warn, "tensor parallel rank %d: a pass failed as on rank 0: %s", rank(), e.what());
    }
  }
}

}  // namespace infer
