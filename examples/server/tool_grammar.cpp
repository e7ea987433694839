// infer serve: grammars that force a tool call (see tool_grammar.h).
#include "tool_grammar.h"

#include <cctype>

#include <infer/infer.h>
#include <nlohmann/json.hpp>

#include "json_limits.h"

namespace serve {

// A GBNF grammar with every rule name (identifiers outside literals, character
// classes, repetition counts and comments) prefixed, so that several converted grammars can live
// in one without their rules colliding.
std::string prefix_rules(const std::string& g, const std::string& prefix) {
  std::string out;
  auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'; };
  for (size_t i = 0; i < g.size();) {
    const char c = g[i];
    if (c == '"' || c == '[' || c == '{') {  // literals, classes, repetition counts {m,n}
      const char close = c == '"' ? '"' : c == '[' ? ']' : '}';
      size_t k = i + 1;
      while (k < g.size() && g[k] != close) k += g[k] == '\\' ? 2 : 1;
      k = std::min(k + 1, g.size());
      out.append(g, i, k - i);
      i = k;
    } else if (ident(c)) {
      size_t k = i;
      while (k < g.size() && ident(g[k])) ++k;
      out += prefix;
      out.append(g, i, k - i);
      i = k;
    } else if (c == '#') {
      size_t k = g.find('\n', i);
      if (k == std::string::npos) k = g.size();
      out.append(g, i, k - i);
      i = k;
    } else {
      out += c;
      ++i;
    }
  }
  return out;
}

// Text as a GBNF string literal.
std::string gbnf_literal(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else out += c;
  }
  return out + "\"";
}

// tool_choice "required" or a named function: a grammar that lets the model
// write only calls in its template's format: {"name": "NAME", "arguments":
// ARGS} (Llama 3: "parameters") with ARGS valid against the tool's parameters
// schema (the library's JSON-schema conversion). Empty with *err set when
// the format has none or a schema cannot be converted.
std::string forced_call_grammar(ToolFormat fmt, const CompletionRequest& rq, std::string* err) {
  using ojson = nlohmann::ordered_json;
  ojson tools;
  try {
    tools = parse_json<ojson>(rq.tools_json, "tools");
  } catch (const JsonLimitError& e) {
    *err = e.what();
    return "";
  }
  const char* args_key = fmt == ToolFormat::Llama3 ? "parameters" : "arguments";
  std::string g, alts;
  int n = 0;
  for (const ojson& t : tools) {
    const ojson& f = t["function"];
    const std::string name = f["name"].get<std::string>();
    if (rq.tool_choice == ToolChoice::Named && name != rq.tool_choice_name) continue;
    const std::string head = "{\"name\": " + ojson(name).dump() + ", \"" + args_key + "\": ";
    std::string args = gbnf_literal("{}");  // no parameters declared: no arguments
    const ojson* params = f.contains("parameters") ? &f["parameters"] : nullptr;
    if (params && !(params->contains("properties") && (*params)["properties"].is_object() && (*params)["properties"].empty())) {
      const std::string schema = params->dump();
      size_t need = 0;
      infer_status st = infer_json_schema_to_grammar(schema.c_str(), nullptr, 0, &need);
      std::string sub;
      if (st == INFER_ERR_BUFFER_TOO_SMALL) {
        sub.assign(need, '\0');
        st = infer_json_schema_to_grammar(schema.c_str(), sub.data(), sub.size(), &need);
        sub.resize(need ? need - 1 : 0);
      }
      if (st != INFER_OK) {
        *err = "the parameters of tool '" + name + "' cannot be turned into a grammar: " + infer_last_error();
        return "";
      }
      const std::string prefix = "tool" + std::to_string(n) + "-";
      g += prefix_rules(sub, prefix) + "\n";
      args = prefix + "root";
    }
    alts += std::string(alts.empty() ? "" : " | ") + gbnf_literal(head) + " " + args + " " + gbnf_literal("}");
    ++n;
  }
  g += "tool-call-json ::= " + alts + "\n";
  const bool many = rq.parallel_tool_calls && rq.tool_choice == ToolChoice::Required;
  switch (fmt) {
    case ToolFormat::Hermes:
      g += many ? "root ::= tool-call-tagged (\"\\n\" tool-call-tagged)*\n" : "root ::= tool-call-tagged\n";
      g += "tool-call-tagged ::= \"<tool_call>\\n\" tool-call-json \"\\n</tool_call>\"\n";
      break;
    case ToolFormat::Mistral:
      g += many ? "root ::= \"[\" tool-call-json (\", \" tool-call-json)* \"]\"\n" : "root ::= \"[\" tool-call-json \"]\"\n";
      break;
    case ToolFormat::Llama3:
      g += "root ::= tool-call-json\n";
      break;
    default:
      *err = "tool_choice 'required' or a named function needs a template whose tool-call format infer serve knows";
      return "";
  }
  return g;
}

}  // namespace serve
