// libFuzzer target: GBNF parsing, JSON schema conversion and incremental
// matching (lib/sampling/grammar.*). The input is split at the first NUL:
// grammar (or schema) text, then bytes to feed the matcher. Compile errors
// must be infer::Error(InvalidArgument), nothing else; a grammar that
// compiles never throws while matching (issue #27: every matcher failure is
// found at compile time). Seeds include 100,000-deep schemas and groups,
// $ref cycles and patterns such as ^((((a*)*)*)*)*$.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "sampling/grammar.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string all(reinterpret_cast<const char*>(data), size);
  const size_t nul = all.find('\0');
  const std::string text = all.substr(0, nul);
  const std::string feed = nul == std::string::npos ? "" : all.substr(nul + 1);
  for (int mode = 0; mode < 2; ++mode) {
    std::shared_ptr<const infer::Grammar> g;
    try {
      g = infer::Grammar::parse(mode == 0 ? text : infer::json_schema_to_gbnf(text));
    } catch (const infer::Error& e) {
      if (e.status() != infer::Status::InvalidArgument) std::abort();
      continue;
    }
    try {
      infer::GrammarMatcher m(g);
      for (size_t i = 0; i < feed.size(); i += 3) {
        const std::string piece = feed.substr(i, 3);
        if (m.accepts(piece) != m.advance(piece)) std::abort();  // accepts() predicts advance()
        (void)m.can_end();
        (void)m.must_end();
      }
    } catch (...) {
      std::abort();  // a compiled grammar failed while matching
    }
  }
  return 0;
}
