// An elastic group (coordinator and two members) with TLS on its data plane: the same allreduce
// bits as the plaintext group; a member without TLS, or with TLS keyed by another secret, refused
// by both members with an error that names TLS.
#include "../job_secret.hpp"
#include "in_process_member.hpp"

#include <weft/comm/elastic.hpp>
#include <weft/comm/tls.hpp>

#include <catch2/catch.hpp>

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace wc = weft::comm;
namespace we = weft::comm::elastic;
using namespace std::chrono_literals;

TEST_CASE("an elastic group over tls matches plaintext, and refuses members that differ", "[comm][elastic][tls]") {
  // Two members each run three allreduce steps; returns each member's final weights (empty when
  // a member failed, with its error in `errors`).
  auto run_group = [](std::shared_ptr<const wc::stream_security> sa, std::shared_ptr<const wc::stream_security> sb,
                      std::vector<std::string>& errors, std::chrono::milliseconds connect) {
    we::coordinator_options co;
    co.min_members = 2;
    co.secret = weft_test::test_job_secret;
    we::coordinator coord(co);
    coord.start();
    std::vector<std::vector<float>> out(2);
    errors.assign(2, "");
    std::vector<std::thread> threads;
    for (int i = 0; i < 2; ++i)
      threads.emplace_back([&, i] {
        try {
          weft_test::elastic_model m;
          auto o = weft_test::member_options(coord, i == 0 ? "a" : "b", connect, 5s, 10s);
          o.tls = i == 0 ? sa : sb;
          we::elastic_group g(m.state, o);
          for (int step = 0; step < 3; ++step) {
            g.sync();
            std::vector<float> grad(m.w.size());
            for (std::size_t e = 0; e < grad.size(); ++e)
              grad[e] = 0.1f * static_cast<float>(
                                   (e * 7 + static_cast<std::size_t>(step) + static_cast<std::size_t>(i)) % 13) -
                        0.3f;
            g.allreduce(std::span<float>(grad));
            for (std::size_t e = 0; e < grad.size(); ++e) m.w[e] += grad[e];
            m.state.advance();
          }
          out[static_cast<std::size_t>(i)] = m.w;
        } catch (const weft::error& e) {
          errors[static_cast<std::size_t>(i)] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    coord.stop();
    return out;
  };
  const auto psk = wc::tls_security::with_psk(weft_test::test_job_secret);
  std::vector<std::string> errors;
  SECTION("TLS in both members: the plaintext group's bits") {
    const auto plain = run_group(nullptr, nullptr, errors, 3s);
    REQUIRE(errors == std::vector<std::string>(2));
    const auto secured = run_group(psk, psk, errors, 3s);
    REQUIRE(errors == std::vector<std::string>(2));
    REQUIRE(secured[0].size() == plain[0].size());
    CHECK(std::memcmp(secured[0].data(), plain[0].data(), plain[0].size() * sizeof(float)) == 0);
    CHECK(std::memcmp(secured[1].data(), plain[0].data(), plain[0].size() * sizeof(float)) == 0);
  }
  SECTION("TLS in one member only: both refuse, naming TLS") {
    run_group(psk, nullptr, errors, 1s);
    INFO("a: " << errors[0] << "\nb: " << errors[1]);
    CHECK(errors[0].find("TLS") != std::string::npos);
    CHECK(errors[1].find("TLS") != std::string::npos);
  }
  SECTION("TLS keyed by different secrets: both refuse") {
    run_group(psk, wc::tls_security::with_psk("another job's secret, 9876543210"), errors, 1s);
    INFO("a: " << errors[0] << "\nb: " << errors[1]);
    CHECK(errors[0].find("TLS") != std::string::npos);
    CHECK(errors[1].find("TLS") != std::string::npos);
  }
}
