// jinja_render: renders a chat template with libinfer's Jinja interpreter,
// for tests/chat_template_check.py (which renders the same with Python's
// jinja2 and compares bytes).
//
//   jinja_render TEMPLATE.jinja CONTEXT.json [NOW_EPOCH]
//
// CONTEXT.json is an object: its keys become the template's variables.
// Output: the rendered text on stdout, exit 0. On failure: exit 2 and
// "RAISED: <message>" on stderr when the template called raise_exception,
// exit 3 and "ERROR <kind>: <message>" otherwise.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "tokenizer/jinja.h"

namespace {

std::string read_file(const char* path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "cannot read %s\n", path);
    std::exit(4);
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const char* kind_name(infer::jinja::ErrorKind k) {
  switch (k) {
    case infer::jinja::ErrorKind::Syntax: return "syntax";
    case infer::jinja::ErrorKind::Unsupported: return "unsupported";
    case infer::jinja::ErrorKind::Raised: return "raised";
    case infer::jinja::ErrorKind::Runtime: return "runtime";
    case infer::jinja::ErrorKind::Limit: return "limit";
  }
  return "?";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: jinja_render TEMPLATE CONTEXT.json [NOW_EPOCH]\n");
    return 4;
  }
  try {
    const infer::jinja::Template t(read_file(argv[1]));
    const infer::jinja::Value ctx = infer::jinja::Value::from_json(read_file(argv[2]));
    infer::jinja::RenderOptions opt;
    if (argc > 3) opt.now = static_cast<std::time_t>(std::strtoll(argv[3], nullptr, 10));
    const std::string out = t.render(ctx, opt);
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  } catch (const infer::jinja::TemplateError& e) {
    if (e.kind() == infer::jinja::ErrorKind::Raised) {
      std::fprintf(stderr, "RAISED: %s\n", e.what());
      return 2;
    }
    std::fprintf(stderr, "ERROR %s: %s\n", kind_name(e.kind()), e.what());
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ERROR other: %s\n", e.what());
    return 3;
  }
}
