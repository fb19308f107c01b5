// Test helper: runs one function per rank on its own thread over an inproc_world and returns
// each rank's exception (or nullptr), so tests can assert on every rank's outcome.
#pragma once

#include <weft/comm/inproc_transport.hpp>

#include <exception>
#include <thread>
#include <vector>

namespace weft_test {

template <class Fn>
std::vector<std::exception_ptr> run_ranks(int p, Fn fn) {
  weft::comm::inproc_world world(p);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(p));
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r)
    threads.emplace_back([&, r] {
      try {
        auto t = world.transport(r);
        fn(t);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  for (auto& th : threads) th.join();
  return errors;
}

inline bool all_ok(const std::vector<std::exception_ptr>& errors) {
  for (const auto& e : errors)
    if (e) return false;
  return true;
}

}  // namespace weft_test
