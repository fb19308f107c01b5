// The hashers' thread-safety promise: const members may be called from several threads at once,
// each with its own state (copies of a sha256_block_hasher share one keyed OpenSSL state).
#include <weft/core/random.hpp>
#include <weft/kv/block_hasher.hpp>

#include <catch2/catch.hpp>

#include <thread>
#include <vector>

using namespace weft::kv;

TEMPLATE_TEST_CASE("one hasher, several threads: the same keys as one thread", "[kv][keys][concurrent]",
                   sha256_block_hasher, fast_block_hasher) {
  const TestType shared{};
  const TestType copy = shared;  // a copy shares the secret (and, for SHA-256, the keyed state)
  std::vector<std::vector<token_id>> prompts(8, std::vector<token_id>(1024));
  weft::rng r(3);
  for (auto& p : prompts)
    for (auto& t : p) t = static_cast<token_id>(r.below(200'000));
  std::vector<std::vector<block_key>> expected(prompts.size());
  for (std::size_t i = 0; i < prompts.size(); ++i) extend_block_keys(prompts[i], 16, {}, expected[i], shared);

  std::vector<std::vector<std::vector<block_key>>> got(4, std::vector<std::vector<block_key>>(prompts.size()));
  std::vector<std::thread> threads;
  for (std::size_t w = 0; w < got.size(); ++w) {
    threads.emplace_back([&, w] {
      const TestType& h = w % 2 ? copy : shared;
      typename TestType::state s;
      for (int round = 0; round < 4; ++round) {
        for (std::size_t i = 0; i < prompts.size(); ++i) {
          got[w][i].clear();
          extend_block_keys(prompts[i], 16, {}, got[w][i], h, s);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& g : got) CHECK(g == expected);
}
