// Strict reading of WEFT_* environment variables (launcher, job secret) and an shm segment left
// by a crashed run before every rank attached.
#include <weft/comm/collectives.hpp>
#include <weft/comm/detail/handshake.hpp>
#include <weft/comm/launcher.hpp>
#include <weft/comm/shm_transport.hpp>

#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <vector>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

namespace wc = weft::comm;

namespace {
struct env_guard {  // restores WEFT_RANK/WEFT_SIZE/WEFT_JOB_SECRET
  env_guard() { clear(); }
  ~env_guard() { clear(); }
  static void clear() {
    ::unsetenv("WEFT_RANK");
    ::unsetenv("WEFT_SIZE");
    ::unsetenv("WEFT_JOB_SECRET");
  }
};
weft::errc code_of(const weft::error& e) { return static_cast<weft::errc>(e.code().value()); }
}  // namespace

TEST_CASE("rank_from_env reads WEFT_RANK and WEFT_SIZE strictly", "[comm][env]") {
  env_guard g;
  CHECK(wc::rank_from_env().rank == 0);
  CHECK(wc::rank_from_env().size == 1);
  ::setenv("WEFT_RANK", "3", 1);
  ::setenv("WEFT_SIZE", "8", 1);
  CHECK(wc::rank_from_env().rank == 3);
  CHECK(wc::rank_from_env().size == 8);
  const std::vector<std::pair<const char*, const char*>> bad = {
      {"", "8"},   {"4294967297", "8"}, {"1", "4294967298"}, {" 1", "8"}, {"1 ", "8"},  {"+1", "8"},    {"0x1", "8"},
      {"-1", "8"}, {"8", "8"},          {"1", "0"},          {"1", ""},   {"1.0", "8"}, {"1", "70000"},
  };
  for (auto [r, s] : bad) {
    ::setenv("WEFT_RANK", r, 1);
    ::setenv("WEFT_SIZE", s, 1);
    INFO("WEFT_RANK='" << r << "' WEFT_SIZE='" << s << "'");
    try {
      (void)wc::rank_from_env();
      FAIL("accepted");
    } catch (const weft::error& e) {
      CHECK(code_of(e) == weft::errc::parse);
    }
  }
  ::unsetenv("WEFT_SIZE");
  ::setenv("WEFT_RANK", "1", 1);
  CHECK_THROWS_AS(wc::rank_from_env(), weft::error);  // one without the other
}

TEST_CASE("WEFT_JOB_SECRET is used when the option is empty, and bounded", "[comm][env]") {
  env_guard g;
  CHECK(weft::comm::detail::job_secret::resolve("", "test").empty());
  ::setenv("WEFT_JOB_SECRET", "0123456789abcdef", 1);
  CHECK_FALSE(weft::comm::detail::job_secret::resolve("", "test").empty());
  ::setenv("WEFT_JOB_SECRET", "", 1);
  CHECK_THROWS_AS(weft::comm::detail::job_secret::resolve("", "test"), weft::error);  // set but empty
  ::setenv("WEFT_JOB_SECRET", "short", 1);
  try {
    (void)weft::comm::detail::job_secret::resolve("", "test");
    FAIL("accepted");
  } catch (const weft::error& e) {
    CHECK(std::string(e.what()).find("short") == std::string::npos);  // a secret is never echoed
  }
}

TEST_CASE("shm: a segment left by a crashed run is not reused by a rank that starts first", "[comm][shm]") {
  const std::string name = "/weft-stale-" + std::to_string(::getpid());
  // 1. A crashed run: rank 0 created and published the segment, then died before rank 1 came.
  const pid_t crashed = ::fork();
  if (crashed == 0) {
    wc::shm_options o;
    o.connect_timeout = std::chrono::seconds(30);
    try {
      wc::shm_transport t(name, 0, 2, o);
    } catch (...) {
    }
    ::_exit(0);
  }
  ::usleep(300'000);
  ::kill(crashed, SIGKILL);
  ::waitpid(crashed, nullptr, 0);
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (attempt == 1) {  // 2. a crashed run that never even published: a sized, zeroed object
      const int fd = ::shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
      REQUIRE(fd >= 0);
      REQUIRE(::ftruncate(fd, 64 << 20) == 0);
      ::close(fd);
    }
    auto res = wc::fork_ranks(2, [&](int r) {
      if (r == 0) ::usleep(300'000);  // rank 1 meets the leftover first
      wc::shm_options o;
      o.connect_timeout = std::chrono::seconds(20);
      wc::shm_transport t(name, r, 2, o);
      std::vector<float> v(1000, static_cast<float>(r + 1));
      wc::allreduce(t, std::span<float>(v));
      for (float x : v)
        if (x != 3.0f) ::_exit(7);
    });
    INFO("attempt " << attempt);
    CHECK(res.ok());
  }
  ::shm_unlink(name.c_str());
}
