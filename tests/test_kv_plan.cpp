// KvPlan (lib/kv/kv_plan.h): the one place that sizes KV pools and says how
// many blocks a sequence holds. The engine, the draft cache, the memory check,
// max_concurrency and the C API all read their numbers from it, so they agree.
#include <cstdint>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/kv_budget.h"
#include "infer/infer.h"
#include "kv/kv_plan.h"
#include "test_models.h"

using namespace infer;

namespace {

KvLayout tiny_layout() {
  KvLayout l;
  l.n_layers = 2;
  l.n_kv_heads = 1;
  l.head_dim = 8;
  return l;
}

}  // namespace

TEST_CASE("KvPlan: pool sizes from blocks, bytes or the default", "[kv][kvplan]") {
  KvSizing z;
  z.block_size = 16;
  z.max_seqs = 4;
  z.n_ctx = 100;
  const KvPlan by_default = KvPlan::make(tiny_layout(), z, 0);
  const uint64_t per_block = by_default.block_bytes();
  REQUIRE(per_block > 0);
  // max_seqs contexts and a block each, rounded down over the whole pool.
  CHECK(by_default.layout.n_blocks == 4 * (100 + 16) / 16);
  CHECK(by_default.layout.n_host_blocks == 0);
  CHECK(by_default.pool_bytes() == per_block * by_default.layout.n_blocks);

  z.default_cap_bytes = per_block * 3;  // the cap wins over max_seqs contexts
  CHECK(KvPlan::make(tiny_layout(), z, 0).layout.n_blocks == 3);

  z.budget_bytes = per_block * 10 + 1;
  z.host_budget_bytes = per_block * 2;
  const KvPlan by_bytes = KvPlan::make(tiny_layout(), z, 0);
  CHECK(by_bytes.layout.n_blocks == 10);
  CHECK(by_bytes.layout.n_host_blocks == 2);
  CHECK(by_bytes.pool_bytes() == per_block * 12);
  CHECK(KvPlan::explicit_blocks(z, per_block) == 10);

  z.kv_blocks = 7;  // overrides the byte budget
  CHECK(KvPlan::make(tiny_layout(), z, 0).layout.n_blocks == 7);

  KvSizing small;
  small.budget_bytes = 1;
  CHECK_THROWS_AS(KvPlan::make(tiny_layout(), small, 0), Error);
  small.clamp = true;  // a pool that must exist gets one block
  CHECK(KvPlan::make(tiny_layout(), small, 0).layout.n_blocks == 1);
  CHECK_THROWS_AS(KvPlan::make(KvLayout{}, KvSizing{}, 0), Error);
}

TEST_CASE("KvPlan: blocks a sequence holds, with and without a window", "[kv][kvplan]") {
  KvSizing z;
  z.block_size = 4;
  z.kv_blocks = 40;
  const KvPlan full = KvPlan::make(tiny_layout(), z, 0);
  CHECK(full.blocks_for(1) == 1);
  CHECK(full.blocks_for(8) == 2);
  CHECK(full.blocks_for(9) == 3);
  CHECK(full.blocks_held(100, 512) == 25);
  CHECK(full.concurrency(9, 100) == 40 / 3);
  CHECK(full.concurrency(9, 5) == 5);      // max_seqs caps it
  CHECK(full.concurrency(1000, 16) == 0);  // does not fit at all

  const KvPlan windowed = KvPlan::make(tiny_layout(), z, 16);
  CHECK(windowed.blocks_held(100) == 16 / 4 + 1);
  CHECK(windowed.blocks_held(100, 8) == 24 / 4 + 1);
  CHECK(windowed.blocks_held(5) == 2);  // shorter than the window
  CHECK(windowed.concurrency(1000, 100) == 40 / 5);
}

TEST_CASE("the engine, the memory check and the C API read one KvPlan", "[kv][kvplan][engine]") {
  NEED_MODEL(model);
  EngineParams ep;
  ep.n_threads = 1;
  ep.kv_blocks = 50;
  ep.block_size = 8;
  ep.host_kv_budget_bytes = 1 << 20;
  Engine e(*model, ep);
  const KvPlan& plan = e.kv_plan();
  CHECK(plan.layout.n_blocks == e.kv().n_blocks_total());
  CHECK(plan.layout.block_size == e.kv().layout().block_size);
  CHECK(plan.bytes(plan.layout.n_blocks) == e.kv().bytes_total());
  // The check after creation passes with exactly the pool's bytes, not one less.
  CHECK_NOTHROW(check_kv_pool(e, plan.pool_bytes()));
  CHECK_THROWS_AS(check_kv_pool(e, plan.pool_bytes() - 1), Error);
  CHECK_THROWS_AS(check_kv_request(*model, ep, plan.pool_bytes() - 1), Error);
  CHECK_NOTHROW(check_kv_request(*model, ep, plan.pool_bytes()));
}

// A request never holds more than its context: max_concurrency clamps the
// lengths it is asked about to n_ctx, in the engine itself (the C API used
// to clamp on its own, so Engine::max_concurrency answered 0 where
// infer_engine_max_concurrency answered the pool's real capacity).
TEST_CASE("max_concurrency clamps to the context in the engine, as the C API does", "[kv][kvplan][engine]") {
  NEED_MODEL(model);
  EngineParams ep;
  ep.n_threads = 1;
  ep.n_ctx = 64;
  ep.block_size = 16;
  ep.kv_blocks = 12;
  Engine e(*model, ep);
  CHECK(e.max_concurrency(1, 63) == 12 / 4);
  CHECK(e.max_concurrency(1, 1 << 30) == e.max_concurrency(1, 63));
  CHECK(e.max_concurrency(60, 1 << 30) == e.max_concurrency(1, 63));
  CHECK(e.max_concurrency(65, 0) == 0);  // a prompt past the context is never admitted
}
