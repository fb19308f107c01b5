// The connection handshake (comm/detail/handshake.hpp) in memory and over socket pairs: with and
// without a job secret, every refusal path, byte-at-a-time delivery, and the concurrent server
// pool against idle and garbage connections.
#include <weft/comm/detail/handshake.hpp>
#include <weft/comm/detail/handshake_io.hpp>

#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <sys/socket.h>

namespace wd = weft::comm::detail;
using wd::handshake;

namespace {

wd::peer_identity ident(int rank, std::string name = {}) {
  wd::peer_identity id;
  id.rank = rank;
  id.size = 4;
  id.count = 2;
  id.instance = 1000 + static_cast<std::uint64_t>(rank);
  id.name = std::move(name);
  return id;
}

// Moves bytes between the two machines, `chunk` at a time, until both finish.
void run_pair(handshake& c, handshake& s, std::size_t chunk = 1 << 20) {
  for (int guard = 0; guard < 100000 && !(c.finished() && s.finished()); ++guard) {
    auto pump = [&](handshake& from, handshake& to) {
      auto out = from.output();
      const std::size_t n = std::min({out.size(), chunk, to.want() ? to.want() : std::size_t{0}});
      if (n > 0) {
        to.consume(out.first(n));
        from.sent(n);
      } else if (!out.empty() && to.finished()) {
        from.sent(out.size());  // the other side stopped reading
      }
    };
    pump(c, s);
    pump(s, c);
    if (c.output().empty() && s.output().empty() && c.want() && s.want()) break;  // both wait: a deadlock
  }
}

}  // namespace

TEST_CASE("handshake: identities are exchanged without a secret", "[comm][handshake]") {
  wd::job_secret none;
  std::string seen_by_server;
  handshake s(handshake::role::server, wd::conn_kind::tcp_mesh, ident(0, "zero"), none,
              [&](const wd::peer_identity& p) {
                seen_by_server = p.name;
                return std::string();
              });
  handshake c(handshake::role::client, wd::conn_kind::tcp_mesh, ident(3, "three"), none,
              [](const wd::peer_identity& p) { return p.rank == 0 ? std::string() : std::string("not rank 0"); });
  for (std::size_t chunk : {std::size_t{1}, std::size_t{7}, std::size_t{1} << 20}) {
    handshake s2 = s, c2 = c;  // copies start from the same point
    run_pair(c2, s2, chunk);
    CHECK(c2.state() == handshake::status::done);
    CHECK(s2.state() == handshake::status::done);
    CHECK(s2.peer().rank == 3);
    CHECK(s2.peer().instance == 1003);
    CHECK(c2.peer().name == "zero");
  }
  CHECK(seen_by_server == "three");
}

TEST_CASE("handshake: the TLS flag must agree; a side that differs is refused by name on both sides",
          "[comm][handshake][tls]") {
  wd::job_secret key("a job secret of 32 characters...");
  for (const bool client_tls : {false, true})
    for (const bool server_tls : {false, true}) {
      auto ci = ident(1, "one"), si = ident(0, "zero");
      ci.tls = client_tls;
      si.tls = server_tls;
      handshake c(handshake::role::client, wd::conn_kind::elastic_mesh, ci, key, nullptr);
      handshake s(handshake::role::server, wd::conn_kind::elastic_mesh, si, key, nullptr);
      run_pair(c, s);
      INFO("client TLS " << client_tls << ", server TLS " << server_tls << "\nclient: " << c.failure()
                         << "\nserver: " << s.failure());
      if (client_tls == server_tls) {
        CHECK(c.state() == handshake::status::done);
        CHECK(s.state() == handshake::status::done);
        CHECK(s.peer().tls == client_tls);
        CHECK(c.peer().tls == server_tls);
      } else {
        CHECK(c.state() == handshake::status::failed);
        CHECK(s.state() == handshake::status::failed);
        CHECK(c.failure().find("TLS") != std::string::npos);
        CHECK(s.failure().find("TLS") != std::string::npos);
        CHECK(s.failure_code() == weft::errc::mismatch);
      }
    }
}

TEST_CASE("handshake: the same secret authenticates both sides; a different one or none fails both",
          "[comm][handshake]") {
  const wd::job_secret key("0123456789abcdef-secret"), other("0123456789abcdef-SECRET"), none;
  auto server = [](const wd::job_secret& k) {
    return handshake(handshake::role::server, wd::conn_kind::elastic_mesh, ident(0), k, nullptr);
  };
  auto client = [](const wd::job_secret& k) {
    return handshake(handshake::role::client, wd::conn_kind::elastic_mesh, ident(1), k, nullptr);
  };
  {
    auto s = server(key), c = client(key);
    run_pair(c, s);
    CHECK(c.state() == handshake::status::done);
    CHECK(s.state() == handshake::status::done);
    CHECK(s.authenticated());
  }
  {
    auto s = server(key), c = client(other);
    run_pair(c, s);
    CHECK(c.state() == handshake::status::failed);
    CHECK(s.state() != handshake::status::done);            // it waits for a proof that never comes (then its deadline)
    CHECK(c.failure().find("prove") != std::string::npos);  // the client checks the server's proof first
  }
  {
    auto s = server(key), c = client(none);
    run_pair(c, s);
    CHECK(c.state() == handshake::status::failed);
    CHECK(s.state() == handshake::status::failed);
    CHECK(c.failure().find("requires a job secret") != std::string::npos);
  }
  {
    auto s = server(none), c = client(key);
    run_pair(c, s);
    CHECK(c.state() == handshake::status::failed);
    CHECK(s.state() == handshake::status::failed);
    CHECK(c.failure().find("no job secret") != std::string::npos);
  }
  CHECK_THROWS_AS(wd::job_secret("short"), weft::error);
  CHECK_THROWS_AS(wd::job_secret(std::string(2000, 'x')), weft::error);
}

TEST_CASE("handshake: a server refusal reaches the client with its reason; kinds must match", "[comm][handshake]") {
  wd::job_secret none;
  {
    handshake s(handshake::role::server, wd::conn_kind::rendezvous, ident(0), none,
                [](const wd::peer_identity&) { return std::string("rank 3 has already joined"); });
    handshake c(handshake::role::client, wd::conn_kind::rendezvous, ident(3), none, nullptr);
    run_pair(c, s);
    CHECK(c.state() == handshake::status::failed);
    CHECK(c.refused_by_peer());
    CHECK(c.failure() == "the peer refused the connection: rank 3 has already joined");
    CHECK(s.state() == handshake::status::failed);
    CHECK_FALSE(s.refused_authenticated_peer());
  }
  {
    handshake s(handshake::role::server, wd::conn_kind::rendezvous, ident(0), none, nullptr);
    handshake c(handshake::role::client, wd::conn_kind::coordinator, ident(3), none, nullptr);
    run_pair(c, s);
    CHECK(c.state() == handshake::status::failed);
    CHECK(s.state() == handshake::status::failed);
    CHECK(s.failure().find("serves rendezvous connections") != std::string::npos);
  }
  {  // the client's own check: it reached someone else
    handshake s(handshake::role::server, wd::conn_kind::tcp_mesh, ident(2), none, nullptr);
    handshake c(handshake::role::client, wd::conn_kind::tcp_mesh, ident(3), none,
                [](const wd::peer_identity& p) { return p.rank == 1 ? std::string() : std::string("not rank 1"); });
    run_pair(c, s);
    CHECK(c.state() == handshake::status::failed);
    CHECK(c.failure() == "not rank 1");
  }
}

TEST_CASE("handshake: malformed hellos fail before any allocation they announce", "[comm][handshake]") {
  wd::job_secret none;
  auto hello = wd::encode_hello(wd::conn_kind::tcp_mesh, false, ident(1, "abc"), {});
  SECTION("wrong magic") {
    hello[0] = std::byte{0};
    handshake s(handshake::role::server, wd::conn_kind::tcp_mesh, ident(0), none, nullptr);
    s.consume(std::span<const std::byte>(hello).first(wd::hello_fixed_bytes));
    CHECK(s.state() == handshake::status::failed);
    CHECK(s.output().empty());  // a stranger is told nothing
  }
  SECTION("a 65535-byte name") {
    hello[10] = std::byte{0xff};
    hello[11] = std::byte{0xff};
    handshake s(handshake::role::server, wd::conn_kind::tcp_mesh, ident(0), none, nullptr);
    s.consume(std::span<const std::byte>(hello).first(wd::hello_fixed_bytes));
    CHECK(s.state() == handshake::status::failed);
    CHECK(s.want() == 0);
  }
  SECTION("another version is answered, then refused") {
    hello[4] = std::byte{99};
    handshake s(handshake::role::server, wd::conn_kind::tcp_mesh, ident(0), none, nullptr);
    s.consume(hello);
    CHECK(s.state() == handshake::status::failed);
    CHECK(s.failure().find("version 99") != std::string::npos);
    CHECK_FALSE(s.output().empty());
  }
  SECTION("a peer of the previous wire version is refused at the handshake, on every kind, either side") {
    // Version 5's elastic mesh spoke frames of its own; 6 runs it on the stream engine's frames.
    const std::string why = "the peer speaks weft wire version " + std::to_string(wd::wire_version - 1) +
                            ", this process " + std::to_string(wd::wire_version);
    for (auto kind : {wd::conn_kind::rendezvous, wd::conn_kind::tcp_mesh, wd::conn_kind::coordinator,
                      wd::conn_kind::elastic_mesh}) {
      INFO("kind " << static_cast<int>(kind));
      auto old = wd::encode_hello(kind, false, ident(1, "abc"), {});
      old[4] = static_cast<std::byte>((wd::wire_version - 1) & 0xff);  // u16 version, little-endian
      old[5] = static_cast<std::byte>((wd::wire_version - 1) >> 8);
      handshake s(handshake::role::server, kind, ident(0), none, nullptr);
      s.consume(old);
      CHECK(s.state() == handshake::status::failed);
      CHECK(s.failure() == why);
      // An old server answering a new client: the client refuses it too.
      handshake c(handshake::role::client, kind, ident(2, "new"), none, nullptr);
      c.consume(old);
      CHECK(c.state() == handshake::status::failed);
      CHECK(c.failure() == why);
    }
  }
  SECTION("a name with a space or a control byte") {
    hello[wd::hello_fixed_bytes + 1] = std::byte{' '};
    handshake s(handshake::role::server, wd::conn_kind::tcp_mesh, ident(0), none, nullptr);
    s.consume(hello);
    CHECK(s.state() == handshake::status::failed);
  }
  SECTION("unknown flags") {
    hello[8] = std::byte{4};
    handshake s(handshake::role::server, wd::conn_kind::tcp_mesh, ident(0), none, nullptr);
    s.consume(hello);
    CHECK(s.state() == handshake::status::failed);
  }
}

TEST_CASE("handshake: drive() over a socket pair; the pool serves real peers past idle and garbage ones",
          "[comm][handshake]") {
  wd::job_secret key("a job secret of 32 characters...");
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  wd::set_nonblocking(sv[0]);
  wd::set_nonblocking(sv[1]);
  handshake s(handshake::role::server, wd::conn_kind::tcp_mesh, ident(0), key, nullptr);
  std::thread server([&] { wd::drive(sv[1], s, weft::comm::clock_type::now() + std::chrono::seconds(10)); });
  handshake c(handshake::role::client, wd::conn_kind::tcp_mesh, ident(1), key, nullptr);
  wd::drive(sv[0], c, weft::comm::clock_type::now() + std::chrono::seconds(10));
  server.join();
  CHECK(c.state() == handshake::status::done);
  CHECK(s.state() == handshake::status::done);
  ::close(sv[0]);
  ::close(sv[1]);

  // A listener with 40 idle connections, 10 that send garbage, then a real client.
  in_addr lo = *wd::parse_ipv4("127.0.0.1");
  wd::unique_fd listener = wd::listen_tcp(lo, 0, "test");
  const auto port = wd::local_port(listener.get());
  weft::comm::detail::wire_limits limits;
  limits.handshake_timeout = std::chrono::milliseconds(300);
  limits.max_pending_handshakes = 32;  // the 40 idle ones also exercise eviction
  std::vector<wd::unique_fd> strangers;
  const auto until = weft::comm::clock_type::now() + std::chrono::seconds(20);
  for (int i = 0; i < 50; ++i) {
    strangers.push_back(wd::connect_tcp(lo, port, in_addr{htonl(INADDR_ANY)}, until, "test", "listener"));
    if (i >= 40) {
      const char junk[] = "GET / HTTP/1.1\r\n\r\n and more bytes than a hello has .............................";
      ::send(strangers.back().get(), junk, sizeof junk, MSG_NOSIGNAL);
    }
  }
  std::thread real([&] {
    auto fd = wd::connect_tcp(lo, port, in_addr{htonl(INADDR_ANY)}, until, "test", "listener");
    handshake hc(handshake::role::client, wd::conn_kind::tcp_mesh, ident(2), key, nullptr);
    wd::drive(fd.get(), hc, until);
    CHECK(hc.state() == handshake::status::done);
  });
  wd::connection_log log("handshake_test", 4);
  wd::handshake_pool pool(
      listener.get(),
      [&] {
        return std::make_unique<handshake>(handshake::role::server, wd::conn_kind::tcp_mesh, ident(0), key, nullptr);
      },
      limits, log);
  auto got = pool.next(until);
  real.join();
  REQUIRE(got.has_value());
  CHECK(got->fd >= 0);
  CHECK(got->peer.rank == 2);
  ::close(got->fd);
  CHECK(log.count() >= 10);  // the garbage ones at least (idle ones may still be pending)
}
