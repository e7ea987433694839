#include "engine/finish.h"

#include <new>

namespace infer {

bool Finisher::may_take(Sequence& s) const {
  Request& r = s.request();
  if (s.done()) return false;  // finished, or cancelled by its owner (retired at the step's end)
  if (r.n_generated() >= r.params().max_tokens) {
    r.finish(FinishReason::Length);
    return false;
  }
  return true;
}

void Finisher::sample(Sequence& s, const float* lg) {
  if (!may_take(s)) return;
  Request& r = s.request();
  int32_t t;
  try {
    s.scratch.assign(lg, lg + n_vocab_);
    t = s.sampler.sample(s.scratch, r.tokens());
  } catch (const Error& e) {
    r.finish(FinishReason::Error, e.status(), e.what());
    return;
  } catch (const std::bad_alloc&) {
    r.finish(FinishReason::Error, Status::OutOfMemory, "out of memory while sampling");
    return;
  }
  emit(s, t);
}

FinishReason Finisher::ends_after(const Sequence& s, bool eog, const StopMatch& stop) const {
  if (eog || stop.found) return FinishReason::Stop;
  const Request& r = s.request();
  if (r.n_generated() + 1 >= r.params().max_tokens || s.n_tokens() + 1 >= n_ctx_) return FinishReason::Length;
  return FinishReason::None;
}

bool Finisher::emit(Sequence& s, int32_t t) {
  Request& r = s.request();
  ++n_emitted_;
  FinishReason end;
  try {
    const bool eog = !r.params().ignore_eos && tok_.is_eog(t);
    StopMatch m;
    if (!eog) {
      s.held += s.text.push(t);
      m = find_stop(s.held, r.params().stop);
    }
    end = ends_after(s, eog, m);
    std::string released;
    if (end == FinishReason::None) {  // all but a possible stop-string start
      const size_t n = s.held.size() - m.hold_back;
      released = s.held.substr(0, n);
      s.held.erase(0, n);
    } else if (m.found) {  // the text before the stop string
      released = s.held.substr(0, m.pos);
      s.held.clear();
    } else {  // everything held, the decoder's incomplete bytes included
      released = s.held + s.text.flush();
      s.held.clear();
    }
    r.append(t, released);
    // The callback runs without the request's lock: it may read its state.
    const TokenCallback& cb = r.params().on_token;
    if (cb && !cb(t, released)) end = end != FinishReason::None ? end : FinishReason::Cancelled;
  } catch (const std::bad_alloc&) {
    r.finish(FinishReason::Error, Status::OutOfMemory, "out of memory while appending a token");
    return false;
  }
  if (end == FinishReason::None) return true;
  r.finish(end);
  return false;
}

}  // namespace infer
