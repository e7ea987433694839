// Fault injection for tests: makes chosen allocation sites fail on purpose so
// tests can check that an allocation failure anywhere in a step leaves the
// engine usable, fails only the requests it concerns (OUT_OF_MEMORY) and
// leaks nothing.
//
// Code marks a site with fault::point("kv.reserve"); unarmed, a point is one
// relaxed atomic load. A test arms a site name (or "*" for every site) to
// fail its n-th hit (and the `count` - 1 hits after it) by throwing
// std::bad_alloc, exactly what a failing operator new would throw there.
#pragma once

#include <atomic>
#include <cstdint>

namespace infer::fault {

namespace detail {
extern std::atomic<bool> g_armed;
void hit(const char* site);  // throws std::bad_alloc when this hit is to fail
}  // namespace detail

inline void point(const char* site) {
  if (detail::g_armed.load(std::memory_order_relaxed)) detail::hit(site);
}

// Fails hits nth .. nth + count - 1 (1-based) of `site` ("*": any site).
void arm(const char* site, int64_t nth, int64_t count = 1);
void disarm();
// Hits of the armed site so far, and how many of them failed.
int64_t hits();
int64_t failures();

}  // namespace infer::fault
