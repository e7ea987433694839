// libFuzzer target: GBNF parsing, JSON schema conversion and incremental
// matching (lib/sampling/grammar.*). The input is split at the first NUL:
// grammar (or schema) text, then bytes to feed the matcher. Errors must be
// infer::Error(InvalidArgument), nothing else.
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
    try {
      const std::string gbnf = mode == 0 ? text : infer::json_schema_to_gbnf(text);
      infer::GrammarMatcher m(infer::Grammar::parse(gbnf));
      for (size_t i = 0; i < feed.size(); i += 3) {
        const std::string piece = feed.substr(i, 3);
        if (m.accepts(piece) != m.advance(piece)) std::abort();  // accepts() predicts advance()
        (void)m.can_end();
        (void)m.must_end();
      }
    } catch (const infer::Error& e) {
      if (e.status() != infer::Status::InvalidArgument) std::abort();
    }
  }
  return 0;
}
