// The C API of tensor parallelism (infer.h, since 1.6) in one process: the
// new fields' defaults, callers built against 1.5 (shorter structs), the
// refusals of tensor_parallel > 1 without an MPI launcher and of
// infer_engine_follow on a whole model, a whole model's rank and size, and
// zero communication in its statistics. The runs across ranks are
// tests/mpi (mpirun).
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>

#include "infer/infer.h"
#include "test_util.h"

namespace {

std::string tiny_model() {
  const std::string path = infer_test::temp_dir() + "/tp-capi-tiny.gguf";
  infer_synth_params sp;
  infer_synth_params_init(&sp);
  sp.preset = "tiny";
  sp.type = "f32";
  sp.n_threads = 2;
  REQUIRE(infer_synth(path.c_str(), &sp, nullptr) == INFER_OK);
  return path;
}

struct ModelHandle {
  infer_model* m = nullptr;
  ModelHandle(const std::string& path, const infer_model_params* p) {
    const infer_status st = infer_model_load(path.c_str(), p, &m);
    INFO(infer_last_error());
    REQUIRE(st == INFER_OK);
  }
  ~ModelHandle() { infer_model_free(m); }
};

// Whether this process runs under an MPI launcher (then a load with
// tensor_parallel 2 would start MPI: not what these tests are about).
bool under_launcher() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
}

}  // namespace

TEST_CASE("C API 1.6: tensor-parallel fields default to a whole model", "[tp][capi]") {
  infer_model_params mp;
  std::memset(&mp, 0x5a, sizeof mp);
  infer_model_params_init(&mp);
  CHECK(mp.tensor_parallel == 0);
  CHECK(mp.mpi_comm == nullptr);
  infer_engine_params ep;
  std::memset(&ep, 0x5a, sizeof ep);
  infer_engine_params_init(&ep);
  CHECK(ep.tensor_parallel == 0);
  CHECK(ep.tp_timeout_ms == 0);
  infer_engine_stats st;
  std::memset(&st, 0x5a, sizeof st);
  infer_engine_stats_init(&st);
  CHECK(st.tp_comm_calls == 0);
  CHECK(st.tp_comm_bytes == 0);
  CHECK(st.tp_comm_seconds == 0);
  CHECK(infer_version_number() >= 10600);
}

TEST_CASE("C API 1.6: a whole model is rank 0 of 1 and cannot follow", "[tp][capi]") {
  const std::string path = tiny_model();
  CHECK(infer_model_tp_rank(nullptr) == -1);
  CHECK(infer_model_tp_size(nullptr) == -1);
  ModelHandle m(path, nullptr);
  CHECK(infer_model_tp_rank(m.m) == 0);
  CHECK(infer_model_tp_size(m.m) == 1);

  infer_engine_params ep;
  infer_engine_params_init(&ep);
  CHECK(infer_engine_follow(m.m, &ep) == INFER_ERR_INVALID_ARGUMENT);
  CHECK(std::string(infer_last_error()).find("whole") != std::string::npos);
  CHECK(infer_engine_follow(m.m, nullptr) == INFER_ERR_INVALID_ARGUMENT);
  CHECK(infer_engine_follow(nullptr, &ep) == INFER_ERR_INVALID_ARGUMENT);
  ep.struct_size = 3;
  CHECK(infer_engine_follow(m.m, &ep) == INFER_ERR_INVALID_ARGUMENT);

  // tensor_parallel 1 loads the whole model, no MPI involved.
  infer_model_params mp;
  infer_model_params_init(&mp);
  mp.tensor_parallel = 1;
  ModelHandle one(path, &mp);
  CHECK(infer_model_tp_size(one.m) == 1);
  CHECK(infer_model_tp_rank(one.m) == 0);
}

TEST_CASE("C API 1.6: engine tensor_parallel must match the model's group", "[tp][capi]") {
  const std::string path = tiny_model();
  ModelHandle m(path, nullptr);
  infer_engine_params ep;
  infer_engine_params_init(&ep);
  ep.max_seqs = 1;
  infer_engine* e = nullptr;
  for (int32_t ok : {0, 1}) {
    ep.tensor_parallel = ok;
    INFO("tensor_parallel " << ok);
    REQUIRE(infer_engine_create(m.m, &ep, &e) == INFER_OK);
    infer_engine_free(e);
    e = nullptr;
  }
  ep.tensor_parallel = 2;
  CHECK(infer_engine_create(m.m, &ep, &e) == INFER_ERR_INVALID_ARGUMENT);
  CHECK(e == nullptr);
  CHECK(std::string(infer_last_error()).find("tensor_parallel is 2") != std::string::npos);
  ep.tensor_parallel = -1;
  CHECK(infer_engine_create(m.m, &ep, &e) == INFER_ERR_INVALID_ARGUMENT);
  ep.tensor_parallel = 0;
  ep.tp_timeout_ms = -1;
  CHECK(infer_engine_create(m.m, &ep, &e) == INFER_ERR_INVALID_ARGUMENT);
  CHECK(std::string(infer_last_error()).find("tp_timeout_ms") != std::string::npos);
  ep.tp_timeout_ms = 5000;
  REQUIRE(infer_engine_create(m.m, &ep, &e) == INFER_OK);

  // A whole model's engine does no communication.
  infer_sampling_params sp;
  infer_sampling_params_init(&sp);
  sp.temperature = 0;
  infer_request_params rp;
  infer_request_params_init(&rp);
  rp.prompt = "Once upon a time";
  rp.max_tokens = 8;
  rp.ignore_eos = 1;
  rp.sampling = &sp;
  infer_request* r = nullptr;
  REQUIRE(infer_submit(e, &rp, &r) == INFER_OK);
  REQUIRE(infer_engine_run(e) == INFER_OK);
  infer_engine_stats st;
  infer_engine_stats_init(&st);
  REQUIRE(infer_engine_get_stats(e, &st) == INFER_OK);
  CHECK(st.n_generated_tokens == 8);
  CHECK(st.tp_comm_calls == 0);
  CHECK(st.tp_comm_bytes == 0);
  CHECK(st.tp_comm_seconds == 0);

  // A 1.5 caller's stats struct ends before the tp fields: they stay untouched.
  infer_engine_stats old;
  std::memset(&old, 0x5a, sizeof old);
  old.struct_size = offsetof(infer_engine_stats, tp_comm_calls);
  REQUIRE(infer_engine_get_stats(e, &old) == INFER_OK);
  CHECK(old.struct_size == offsetof(infer_engine_stats, tp_comm_calls));
  CHECK(old.n_generated_tokens == 8);
  uint64_t sentinel;
  std::memset(&sentinel, 0x5a, sizeof sentinel);
  CHECK(old.tp_comm_calls == sentinel);
  infer_request_free(r);
  infer_engine_free(e);
}

TEST_CASE("C API 1.6: callers built against 1.5 get whole models and engines", "[tp][capi]") {
  const std::string path = tiny_model();
  // The new fields lie beyond a 1.5 struct: garbage there must be ignored.
  infer_model_params mp;
  infer_model_params_init(&mp);
  mp.tensor_parallel = 4;
  mp.mpi_comm = &mp;
  mp.struct_size = offsetof(infer_model_params, tensor_parallel);
  ModelHandle m(path, &mp);
  CHECK(infer_model_tp_size(m.m) == 1);

  infer_engine_params ep;
  infer_engine_params_init(&ep);
  ep.max_seqs = 1;
  ep.tensor_parallel = 3;
  ep.tp_timeout_ms = -5;
  ep.struct_size = offsetof(infer_engine_params, tensor_parallel);
  infer_engine* e = nullptr;
  const infer_status st = infer_engine_create(m.m, &ep, &e);
  INFO(infer_last_error());
  CHECK(st == INFER_OK);
  infer_engine_free(e);

  // infer_bench: the 1.6 fields of the result (decode steps, communication).
  infer_engine_params bep;
  infer_engine_params_init(&bep);
  infer_bench_params bp;
  infer_bench_params_init(&bp);
  bp.n_prompt = 8;
  bp.n_gen = 5;
  bp.repetitions = 1;
  bp.n_threads = 1;
  bp.engine = &bep;
  infer_bench_result r;
  std::memset(&r, 0, sizeof r);
  r.struct_size = sizeof r;
  REQUIRE(infer_bench(m.m, &bp, &r) == INFER_OK);
  CHECK(r.decode_steps == 4);  // batch 1: one token per decode step after the first
  CHECK(r.decode_comm_ms == 0);
  CHECK(r.prefill_comm_ms == 0);
  CHECK(r.decode_comm_bytes == 0);
  infer_bench_result old;
  std::memset(&old, 0x5a, sizeof old);
  old.struct_size = offsetof(infer_bench_result, decode_steps);
  REQUIRE(infer_bench(m.m, &bp, &old) == INFER_OK);
  CHECK(old.n_gen == 5);
  int64_t sentinel;
  std::memset(&sentinel, 0x5a, sizeof sentinel);
  CHECK(old.decode_steps == sentinel);
}

TEST_CASE("C API 1.6: tensor_parallel > 1 needs an MPI job of that size", "[tp][capi]") {
  const std::string path = tiny_model();
  infer_model_params mp;
  infer_model_params_init(&mp);
  infer_model* m = nullptr;

  mp.tensor_parallel = -1;
  CHECK(infer_model_load(path.c_str(), &mp, &m) == INFER_ERR_INVALID_ARGUMENT);
  CHECK(m == nullptr);

  // Tensor parallelism is the CPU backend's.
  mp.tensor_parallel = 2;
  mp.backend = INFER_BACKEND_CUDA;
  CHECK(infer_model_load(path.c_str(), &mp, &m) == INFER_ERR_UNSUPPORTED);
  CHECK(m == nullptr);

  if (under_launcher()) {
    WARN("SKIPPED: running under an MPI launcher");
    return;
  }
  mp.backend = INFER_BACKEND_AUTO;
  const infer_status st = infer_model_load(path.c_str(), &mp, &m);
  const std::string msg = infer_last_error();
  INFO(msg);
  CHECK(m == nullptr);
  // A build with MPI: this process has no launcher; without MPI: unsupported.
  CHECK((st == INFER_ERR_INVALID_ARGUMENT || st == INFER_ERR_UNSUPPORTED));
  if (st == INFER_ERR_INVALID_ARGUMENT) CHECK(msg.find("mpirun -np 2") != std::string::npos);
  if (st == INFER_ERR_UNSUPPORTED) CHECK(msg.find("MPI") != std::string::npos);
}
