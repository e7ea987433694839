#include "dist/tp.h"

#include "core/error.h"

namespace infer {

TpGroup::TpGroup(std::shared_ptr<Communicator> comm) : comm_(std::move(comm)) {}
void TpGroup::agree(uint64_t, const char*) const { raise(Status::Unsupported, "tensor parallelism: not yet"); }
void TpGroup::announce_kv(const KvLayout&) { raise(Status::Unsupported, "tensor parallelism: not yet"); }
void TpGroup::record_copy(KvTier, int, KvTier, int) {}
void TpGroup::announce_pass(const Batch&, const KvCache*, const uint8_t*, int, bool, bool) {
  raise(Status::Unsupported, "tensor parallelism: not yet");
}
void TpGroup::announce_stop() {}
void TpGroup::follow(const Model&, Backend&) { raise(Status::Unsupported, "tensor parallelism: not yet"); }

}  // namespace infer
