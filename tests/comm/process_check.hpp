// Test helper for multi-process tests: runs every allreduce algorithm and the other collectives
// over one transport inside a forked rank and throws (making the rank exit non-zero) on any
// wrong element, so the parent test asserts on exit codes.
#pragma once

#include <weft/comm/collectives.hpp>
#include <weft/comm/nonblocking.hpp>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

namespace weft_test {

inline float pvalue(int rank, std::size_t i) {
  return static_cast<float>(static_cast<int>((i * 7 + static_cast<std::size_t>(rank) * 13) % 17) - 8);
}

template <class Tr>
void check_all_collectives(Tr& t, const std::vector<std::size_t>& sizes, std::size_t segment_bytes) {
  namespace wc = weft::comm;
  const int p = t.size(), r = t.rank();
  std::vector<int> hosts(static_cast<std::size_t>(p));
  for (int q = 0; q < p; ++q) hosts[static_cast<std::size_t>(q)] = q / 2;
  for (auto algo : {wc::algorithm::ring, wc::algorithm::tree, wc::algorithm::star, wc::algorithm::halving_doubling,
                    wc::algorithm::recursive_doubling, wc::algorithm::hierarchical})
    for (std::size_t n : sizes) {
      std::vector<float> data(n);
      for (std::size_t i = 0; i < n; ++i) data[i] = pvalue(r, i);
      wc::options opt;
      opt.algo = algo;
      opt.hosts = hosts;
      opt.segment_bytes = segment_bytes;
      opt.timeout = std::chrono::seconds(30);
      wc::allreduce(t, std::span<float>(data), weft::op::sum{}, opt);
      for (std::size_t i = 0; i < n; ++i) {
        float expect = 0;
        for (int q = 0; q < p; ++q) expect += pvalue(q, i);
        if (data[i] != expect)
          throw std::runtime_error("allreduce " + std::string(wc::to_string(algo)) + " n=" + std::to_string(n) +
                                   " wrong at " + std::to_string(i));
      }
    }
  const std::size_t b = 1001;
  std::vector<std::int32_t> in(static_cast<std::size_t>(p) * b), out(static_cast<std::size_t>(p) * b);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = r * 100000 + static_cast<std::int32_t>(i);
  wc::alltoall(t, std::span<const std::int32_t>(in), std::span<std::int32_t>(out));
  for (int q = 0; q < p; ++q)
    for (std::size_t i = 0; i < b; ++i)
      if (out[static_cast<std::size_t>(q) * b + i] !=
          q * 100000 + static_cast<std::int32_t>(static_cast<std::size_t>(r) * b + i))
        throw std::runtime_error("alltoall wrong");
  std::vector<std::int32_t> mine(b, r), all(static_cast<std::size_t>(p) * b);
  wc::allgather(t, std::span<const std::int32_t>(mine), std::span<std::int32_t>(all));
  for (std::size_t i = 0; i < all.size(); ++i)
    if (all[i] != static_cast<std::int32_t>(i / b)) throw std::runtime_error("allgather wrong");
  std::vector<std::int32_t> bc(b, r);
  wc::broadcast(t, std::span<std::int32_t>(bc), p - 1);
  for (auto v : bc)
    if (v != p - 1) throw std::runtime_error("broadcast wrong");
  // Three collectives in flight at once on their own channels, big enough to need many wake-ups.
  if constexpr (wc::concurrent_transport<Tr>) {
    std::vector<float> a(300'001, 1.0f), b(5'000, 2.0f);
    std::vector<std::int32_t> in2(static_cast<std::size_t>(p) * 2'000, r), out2(in2.size());
    wc::options oa, ob, oc;
    oa.channel = 11;
    ob.channel = 12;
    ob.algo = wc::algorithm::tree;
    oc.channel = 13;
    auto ha = wc::start_allreduce(t, std::span<float>(a), weft::op::sum{}, oa);
    auto hb = wc::start_allreduce(t, std::span<float>(b), weft::op::sum{}, ob);
    auto hc = wc::start_alltoall(t, std::span<const std::int32_t>(in2), std::span<std::int32_t>(out2), oc);
    hb.wait();
    hc.wait();
    ha.wait();
    for (float x : a)
      if (x != static_cast<float>(p)) throw std::runtime_error("non-blocking allreduce a wrong");
    for (float x : b)
      if (x != 2.0f * static_cast<float>(p)) throw std::runtime_error("non-blocking allreduce b wrong");
    for (std::size_t i = 0; i < out2.size(); ++i)
      if (out2[i] != static_cast<std::int32_t>(i / 2'000)) throw std::runtime_error("non-blocking alltoall wrong");
  }
  wc::barrier(t);
}

/// The body of forked rank r of a group that disagrees (rank 1 reduces 11 elements, the others 10):
/// exits 42 when allreduce fails fast (under 5 s) with mismatch or aborted, 2 when it fails otherwise,
/// 3 when it does not fail. The parent checks that every rank exited 42.
template <class Tr>
[[noreturn]] void disagreeing_allreduce(Tr& t, int r) {
  namespace wc = weft::comm;
  std::vector<float> data(r == 1 ? 11 : 10, 1.0f);
  wc::options opt;
  opt.timeout = std::chrono::seconds(20);
  const auto start = wc::clock_type::now();
  try {
    wc::allreduce(t, std::span<float>(data), weft::op::sum{}, opt);
  } catch (const weft::error& e) {
    const auto code = static_cast<weft::errc>(e.code().value());
    const bool fast = wc::clock_type::now() - start < std::chrono::seconds(5);
    ::_exit(fast && (code == weft::errc::mismatch || code == weft::errc::aborted) ? 42 : 2);
  }
  ::_exit(3);
}

}  // namespace weft_test
