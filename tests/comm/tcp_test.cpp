#include "job_secret.hpp"
#include "process_check.hpp"

#include <weft/comm/launcher.hpp>
#include <weft/comm/tcp_transport.hpp>

#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <unistd.h>

namespace wc = weft::comm;

namespace {
// A port the kernel just handed out, so parallel test runs do not collide.
std::uint16_t free_port() {
  auto fd = weft::comm::detail::listen_tcp(*weft::comm::detail::parse_ipv4("127.0.0.1"), 0, "free_port");
  return weft::comm::detail::local_port(fd.get());
}
}  // namespace

TEST_CASE("tcp transport: every algorithm in forked processes, rank-0 rendezvous", "[comm][tcp]") {
  for (int p : {1, 2, 3, 4, 5, 7, 8}) {
    const auto port = free_port();
    const auto P = static_cast<std::size_t>(p);
    auto res = wc::fork_ranks(p, [&](int r) {
      wc::tcp_options o;
      o.connections = 2;
      o.stripe_min = 1024;  // stripe even small messages so both sockets carry pieces
      wc::tcp_transport t(r, p, wc::tcp_rendezvous::rank0("127.0.0.1", port), o);
      weft_test::check_all_collectives(t, {0, 1, P - 1, P + 1, 4 * P + 3, 70'001}, 4096);
    });
    INFO("p=" << p);
    CHECK(res.ok());
  }
}

TEST_CASE("tcp transport: file store, interface binding, 3 connections, several MiB", "[comm][tcp]") {
  const auto dir = std::filesystem::temp_directory_path() / ("weft-tcp-test-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto res = wc::fork_ranks(4, [&](int r) {
    wc::tcp_options o;
    o.connections = 3;
    o.bind = "lo";
    o.send_buffer = 1 << 20;
    o.recv_buffer = 1 << 20;
    wc::tcp_transport t(r, 4, wc::tcp_rendezvous::file_store(dir.string()), o);
    weft_test::check_all_collectives(t, {(std::size_t{3} << 20) / 4 + 5}, std::size_t{1} << 19);
  });
  std::filesystem::remove_all(dir);
  CHECK(res.ok());
}

TEST_CASE("tcp transport: disagreeing ranks fail fast everywhere; a dead peer is an error", "[comm][tcp]") {
  const auto port = free_port();
  auto res = wc::fork_ranks(3, [&](int r) {
    wc::tcp_transport t(r, 3, wc::tcp_rendezvous::rank0("127.0.0.1", port));
    weft_test::disagreeing_allreduce(t, r);
  });
  CHECK(res.status == std::vector<int>{42, 42, 42});

  const auto port2 = free_port();
  auto res2 = wc::fork_ranks(2, [&](int r) {
    wc::tcp_transport t(r, 2, wc::tcp_rendezvous::rank0("127.0.0.1", port2));
    if (r == 1) ::_exit(0);
    std::vector<float> data(10, 1.0f);
    try {
      wc::allreduce(t, std::span<float>(data));
    } catch (const weft::error& e) {
      ::_exit(static_cast<weft::errc>(e.code().value()) == weft::errc::peer_failure ? 42 : 2);
    }
    ::_exit(3);
  });
  CHECK(res2.status == std::vector<int>{42, 0});

  // A rank 0 that nobody joins times out with a clear error instead of hanging.
  wc::tcp_options quick;
  quick.connect_timeout = std::chrono::milliseconds(300);
  CHECK_THROWS_AS(wc::tcp_transport(0, 2, wc::tcp_rendezvous::rank0("127.0.0.1", free_port()), quick), weft::error);
  CHECK_THROWS_AS(wc::tcp_transport(2, 2, wc::tcp_rendezvous::rank0("127.0.0.1", 1)), weft::error);
  CHECK_THROWS_AS(wc::tcp_transport(0, 2, wc::tcp_rendezvous::rank0("127.0.0.1", 0)), weft::error);
  wc::tcp_options bad_if;
  bad_if.bind = "no-such-interface0";
  CHECK_THROWS_AS(wc::tcp_transport(0, 1, wc::tcp_rendezvous::rank0("127.0.0.1", 5), bad_if), weft::error);
}
