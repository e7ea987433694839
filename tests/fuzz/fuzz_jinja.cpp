// libFuzzer target: the chat-template interpreter (lib/tokenizer/jinja.*).
// The input is split at the first NUL: template text, then JSON for the
// template's variables (a fixed conversation with tools when absent or not
// an object). Parsing and rendering may fail only with jinja::TemplateError
// (the JSON reader with Error(InvalidArgument)); limits are tight so that
// runaway templates end quickly.
//
// Every render is also checked against its budgets (issue 27): the steps and
// working memory it reports stay within Limits, the output within
// max_output, and the heap it really holds while rendering (counted by the
// operator new / delete below) stays within a fixed multiple of the budgets.
// The corpus (corpus-jinja) carries the hostile templates of
// ../shared/repro/untrusted: values that contain themselves, deep nesting,
// range(10**9), multiplied lists, substring search over megabytes.
#include <malloc.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <string>

#include "core/error.h"
#include "tokenizer/jinja.h"

namespace {

std::atomic<size_t> g_live{0};
std::atomic<size_t> g_peak{0};

void* counted_alloc(size_t n) {
  void* p = std::malloc(n ? n : 1);
  if (!p) throw std::bad_alloc();
  const size_t live = g_live.fetch_add(malloc_usable_size(p)) + malloc_usable_size(p);
  size_t peak = g_peak.load();
  while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {
  }
  return p;
}

void counted_free(void* p) {
  if (!p) return;
  g_live.fetch_sub(malloc_usable_size(p));
  std::free(p);
}

const char* kContext = R"({"messages": [
  {"role": "system", "content": "You are a helpful assistant."},
  {"role": "user", "content": "Hello \u00e9"},
  {"role": "assistant", "content": null, "tool_calls": [{"id": "abcdef123", "type": "function",
    "function": {"name": "get_weather", "arguments": {"location": "Paris"}}}]},
  {"role": "tool", "content": "22"},
  {"role": "assistant", "content": "<think>x</think> It is 22."}],
 "tools": [{"type": "function", "function": {"name": "get_weather", "description": "d",
   "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}}}],
 "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>", "enable_thinking": false})";

}  // namespace

void* operator new(size_t n) { return counted_alloc(n); }
void* operator new[](size_t n) { return counted_alloc(n); }
void operator delete(void* p) noexcept { counted_free(p); }
void operator delete[](void* p) noexcept { counted_free(p); }
void operator delete(void* p, size_t) noexcept { counted_free(p); }
void operator delete[](void* p, size_t) noexcept { counted_free(p); }
// The nothrow forms too: libFuzzer allocates its inputs with new(std::nothrow)
// and frees them with delete; a new from the sanitizer's allocator freed by
// counted_free is an alloc-dealloc mismatch under ASan.
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  void* p = std::malloc(n ? n : 1);
  if (p) {
    const size_t live = g_live.fetch_add(malloc_usable_size(p)) + malloc_usable_size(p);
    size_t peak = g_peak.load();
    while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {
    }
  }
  return p;
}
void* operator new[](size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void operator delete(void* p, const std::nothrow_t&) noexcept { counted_free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { counted_free(p); }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string all(reinterpret_cast<const char*>(data), size);
  const size_t nul = all.find('\0');
  const std::string text = all.substr(0, nul);
  infer::jinja::Value ctx;
  if (nul != std::string::npos) {
    try {
      ctx = infer::jinja::Value::from_json(all.substr(nul + 1));
    } catch (const infer::jinja::TemplateError&) {
      std::abort();  // the JSON reader raises plain errors
    } catch (const infer::Error& e) {
      if (e.status() != infer::Status::InvalidArgument) std::abort();
    }
  }
  if (!ctx.is_object()) ctx = infer::jinja::Value::from_json(kContext);
  infer::jinja::Limits lim;
  lim.max_steps = 200000;
  lim.max_output = 1 << 20;
  lim.max_work_bytes = 16 << 20;
  infer::jinja::RenderStats stats;
  size_t base = 0;
  bool rendered = false;
  try {
    const infer::jinja::Template t(text, lim);
    infer::jinja::RenderOptions opt;
    opt.now = 1721995200;
    opt.stats = &stats;
    base = g_live.load();
    g_peak.store(base);
    rendered = true;
    const std::string out = t.render(ctx, opt);
    if (out.size() > lim.max_output) std::abort();
  } catch (const infer::jinja::TemplateError& e) {
    if (e.kind() == infer::jinja::ErrorKind::Syntax || e.kind() == infer::jinja::ErrorKind::Unsupported) {
      if (e.status() != infer::Status::Unsupported) std::abort();
    } else if (e.status() != infer::Status::InvalidArgument) {
      std::abort();
    }
  }
  if (rendered) {
    // The budgets held: the counters (one step or one value of slack for the
    // charge that tripped the bound) and the heap really held.
    if (stats.steps > lim.max_steps + 1) std::abort();
    if (stats.work_bytes > lim.max_work_bytes) std::abort();
    const size_t held = g_peak.load() - base;
    if (held > 2 * lim.max_work_bytes + 8 * lim.max_output + (size_t{4} << 20)) std::abort();
  }
  return 0;
}
