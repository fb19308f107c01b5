// Archetype of detail::stream_link: the weakest link the concept accepts (an opaque wait token,
// no single copy, no staging, nothing const) runs a message through two stream_engines, so the
// engine uses nothing beyond the concept. Real links and the tests' fake link model it too.
#include "fake_link.hpp"

#include <weft/comm/detail/link.hpp>
#include <weft/comm/concepts.hpp>
#include <weft/comm/detail/stream_engine.hpp>
#include <weft/comm/options.hpp>
#include <weft/comm/shm_transport.hpp>
#include <weft/comm/tcp_transport.hpp>
#include <weft/core/reduce_ops.hpp>

#include <catch2/catch.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace wd = weft::comm::detail;

// Bytes in flight between two ranks in one process: pipe[from][to], unbounded, read from `taken`.
struct archetype_pipe {
  std::array<std::array<std::vector<std::byte>, 2>, 2> bytes;
  std::array<std::array<std::size_t, 2>, 2> taken{};
};

class archetype_link {
 public:
  static constexpr std::size_t stage_bytes = 0;
  struct wait_token {};  // opaque: the engine only hands it back

  archetype_link(archetype_pipe& pipe, int rank) : pipe_(pipe), rank_(rank) {}
  std::size_t write_some(int peer, int, const wd::io_part* parts, int count) {
    auto& out = pipe_.bytes[static_cast<std::size_t>(rank_)][static_cast<std::size_t>(peer)];
    std::size_t n = 0;
    for (int i = 0; i < count; ++i) {
      out.insert(out.end(), parts[i].data, parts[i].data + parts[i].len);
      n += parts[i].len;
    }
    return n;
  }
  std::size_t read_some(int peer, int, std::byte* dst, std::size_t n) {
    auto& in = pipe_.bytes[static_cast<std::size_t>(peer)][static_cast<std::size_t>(rank_)];
    auto& at = pipe_.taken[static_cast<std::size_t>(peer)][static_cast<std::size_t>(rank_)];
    const std::size_t k = std::min(n, in.size() - at);
    if (k > 0) std::memcpy(dst, in.data() + at, k);
    at += k;
    return k;
  }
  void commit_reads(int, int) {}
  wait_token prepare_wait() { return {}; }
  void wait(wait_token, weft::comm::deadline, int) {}
  void poke() {}
  void check_alive(int) {}
  std::size_t remote_min() { return SIZE_MAX; }
  void remote_read(int, std::uint64_t, std::byte*, std::size_t) {
    throw weft::error(weft::errc::unsupported, "archetype_link", "no single copy");
  }
  void remote_ack(int) {}
  std::uint64_t remote_post(int) { return 0; }
  std::uint64_t remote_acked(int) { return 0; }
  void on_abort(const std::string& why) { aborted = why; }
  std::string aborted;

 private:
  archetype_pipe& pipe_;
  int rank_;
};

// Misspelled or missing members are rejected (a link without them would not compile in the engine).
struct link_without_commit_reads : weft_test::fake_link<0> {
  void commit_reads() = delete;
};

}  // namespace

static_assert(wd::stream_link<archetype_link>);
static_assert(wd::stream_link<wd::shm_link>);
static_assert(wd::stream_link<wd::tcp_link>);
static_assert(wd::stream_link<weft_test::fake_link<0>> && wd::stream_link<weft_test::fake_link<64>>);
static_assert(!wd::stream_link<link_without_commit_reads>);
static_assert(!wd::stream_link<int>);

TEST_CASE("stream_engine runs a message over the archetype link", "[comm][archetype]") {
  archetype_pipe pipe;
  archetype_link link0(pipe, 0), link1(pipe, 1);
  wd::stream_engine<archetype_link> e0(link0, 0, 2, 1, SIZE_MAX, "archetype");
  wd::stream_engine<archetype_link> e1(link1, 1, 2, 1, SIZE_MAX, "archetype");
  std::vector<std::byte> sent(1000), got(1000);
  for (std::size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<std::byte>(i * 7);
  const auto until = weft::comm::clock_type::now() + std::chrono::seconds(5);
  e0.send(1, weft::comm::msg_tag{3, 0}, std::span<const std::byte>(sent), until);
  e1.recv(0, weft::comm::msg_tag{3, 0}, std::span<std::byte>(got), until);
  CHECK(got == sent);
  CHECK(link0.aborted.empty());
  CHECK(link1.aborted.empty());
}

// The optional link hook write_whole: detected by writes_whole (no opt-in: links are internal). An
// eager message goes through it when the link has it; a misspelled one is never called and the
// message goes through write_some, as on a link without the hook.
namespace {

struct whole_writing_link : archetype_link {
  using archetype_link::archetype_link;
  std::shared_ptr<int> calls = std::make_shared<int>(0);
  std::size_t write_whole(int peer, int conn, const wd::io_part* parts, int count) {
    ++*calls;
    return write_some(peer, conn, parts, count);  // the archetype's pipe takes every byte
  }
};
struct misspelled_whole_link : archetype_link {  // "write_hole": never called
  using archetype_link::archetype_link;
  std::shared_ptr<int> calls = std::make_shared<int>(0);
  std::size_t write_hole(int peer, int conn, const wd::io_part* parts, int count) {
    ++*calls;
    return write_some(peer, conn, parts, count);
  }
};

// Sends one eager message from rank 0 to rank 1 over Link; returns rank 0's write_whole calls.
template <class Link>
int eager_write_whole_calls() {
  archetype_pipe pipe;
  Link link0(pipe, 0), link1(pipe, 1);
  wd::engine_config cfg;
  cfg.eager_max = 256;
  wd::stream_engine<Link> e0(link0, 0, 2, 1, SIZE_MAX, "archetype", cfg);
  wd::stream_engine<Link> e1(link1, 1, 2, 1, SIZE_MAX, "archetype", cfg);
  std::vector<std::byte> sent(100), got(100);
  for (std::size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<std::byte>(i * 3 + 1);
  const auto until = weft::comm::clock_type::now() + std::chrono::seconds(5);
  e0.send(1, weft::comm::msg_tag{4, 0}, std::span<const std::byte>(sent), until);
  e1.recv(0, weft::comm::msg_tag{4, 0}, std::span<std::byte>(got), until);
  CHECK(got == sent);
  return *link0.calls;
}

}  // namespace

static_assert(wd::writes_whole<whole_writing_link>);
static_assert(wd::writes_whole<wd::shm_link>);
static_assert(!wd::writes_whole<wd::tcp_link>);
static_assert(!wd::writes_whole<archetype_link>);
static_assert(!wd::writes_whole<misspelled_whole_link>);
static_assert(wd::stream_link<misspelled_whole_link>);

TEST_CASE("stream_engine writes an eager frame through write_whole, never a misspelled one", "[comm][archetype]") {
  CHECK(eager_write_whole_calls<whole_writing_link>() >= 1);
  CHECK(eager_write_whole_calls<misspelled_whole_link>() == 0);
}

// The optional reduce-operator hook Op::name: detected by names_reduce_op, with or without the
// opt-in; a misspelled name without the opt-in is (as before) not read, the operator hashing as
// "user-op"; with the opt-in it is a compile error (the sched and coding compile-fail tests show the
// pattern).
namespace {

struct named_sum : weft::op::sum {
  static constexpr bool provides_name = true;
  static constexpr std::string_view name = "named-sum";
};
struct named_sum_without_opt_in : weft::op::sum {
  static constexpr std::string_view name = "legacy-sum";
};
struct misspelled_name_sum {  // "nmae": hashes as "user-op"
  static constexpr std::string_view nmae = "misspelled-sum";
  template <class A>
  constexpr A operator()(A a, A b) const noexcept {
    return a + b;
  }
  template <class A>
  static constexpr A identity() noexcept {
    return A{};
  }
};
struct opted_out_sum : misspelled_name_sum {  // provides_name = false: no check, no name
  static constexpr bool provides_name = false;
};

}  // namespace

static_assert(weft::comm::names_reduce_op<named_sum>);
static_assert(weft::comm::names_reduce_op<named_sum_without_opt_in>);
static_assert(weft::comm::names_reduce_op<weft::op::sum> && weft::comm::names_reduce_op<weft::op::max>);
static_assert(!weft::comm::names_reduce_op<misspelled_name_sum>);
static_assert(!weft::comm::names_reduce_op<opted_out_sum>);
static_assert(weft::comm::op_name<named_sum>() == "named-sum");
static_assert(weft::comm::op_name<named_sum_without_opt_in>() == "legacy-sum");
static_assert(weft::comm::op_name<misspelled_name_sum>() == "user-op");
static_assert(weft::comm::op_name<weft::op::sum>() == "sum");

TEST_CASE("the check word hashes the operator's name with weft's hash", "[comm][archetype]") {
  using weft::comm::make_check;
  constexpr auto c = weft::comm::collective::allreduce;
  constexpr auto a = weft::comm::algorithm::ring;
  // Still a compile-time constant (the collectives rely on it folding away).
  constexpr std::uint32_t sum = make_check(c, weft::dtype::f32, a, 1000, "sum", 1 << 20);
  CHECK(sum == make_check(c, weft::dtype::f32, a, 1000, weft::comm::op_name<weft::op::sum>(), 1 << 20));
  CHECK(sum != make_check(c, weft::dtype::f32, a, 1000, "max", 1 << 20));
  CHECK(sum != make_check(c, weft::dtype::f32, a, 1000, std::string_view("sum\0", 4), 1 << 20));
  CHECK(make_check(c, weft::dtype::f32, a, 1000, weft::comm::op_name<misspelled_name_sum>(), 1 << 20) ==
        make_check(c, weft::dtype::f32, a, 1000, "user-op", 1 << 20));
  CHECK(weft::comm::detail::hash_op_name("sum") != weft::comm::detail::hash_op_name("mus"));
}
