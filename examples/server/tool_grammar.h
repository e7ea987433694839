// infer serve: grammars that force a tool call (tool_choice "required" or a
// named function), built from the request's tool schemas with the library's
// JSON-schema conversion.
#pragma once

#include <string>

#include "request.h"
#include "tool_calls.h"

namespace serve {

// A GBNF grammar with every rule name prefixed (identifiers outside literals,
// character classes, repetition counts and comments), so that several
// converted grammars can live in one without their rules colliding.
std::string prefix_rules(const std::string& g, const std::string& prefix);

// Text as a GBNF string literal.
std::string gbnf_literal(const std::string& text);

// tool_choice "required" or a named function: a grammar that lets the model
// write only calls in the template's format (`fmt`). Empty with *err set when
// the format has none or a schema cannot be converted.
std::string forced_call_grammar(ToolFormat fmt, const CompletionRequest& rq, std::string* err);

}  // namespace serve
