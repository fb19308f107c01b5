// kv_prefix_cache: how an engine hands its KV-block bookkeeping to weft::kv.
//  1. Three chat requests share a system prompt: the second and third reuse its blocks once the
//     first one's prefill has run (a block is shared only after its KV is reported computed).
//  2. Parallel sampling forks a request; the first token a sample writes copies the shared block;
//     a preempted request goes to the host tier, whose copies keep serving prefix hits.
//  3. A radix prefix cache with a user-written eviction policy ("one-hit wonders go first").
#include <weft/kv.hpp>

#include <cstdio>
#include <numeric>
#include <vector>

using namespace weft::kv;

namespace {

std::vector<token_id> tokens(std::size_t n, token_id first) {
  std::vector<token_id> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

void print_row(const char* name, std::span<const block_id> row) {
  std::printf("  %-10s block table:", name);
  for (const block_id b : row) std::printf(" %u", b.value());
  std::printf("\n");
}

// A user-written eviction policy: nodes matched fewer than twice are evicted before any node that
// proved reusable, least recently used first within each class. Satisfies weft::kv::eviction_policy.
struct second_chance_eviction {
  std::pair<int, std::uint64_t> score(const eviction_stats& s) const { return {s.hits >= 2 ? 1 : 0, s.last_access}; }
};
static_assert(eviction_policy<second_chance_eviction>);

}  // namespace

int main() {
  std::printf("== 1. prefix sharing (block size 16, 64 blocks) ==\n");
  kv_config config;
  config.num_blocks = 64;
  config.block_size = 16;
  config.host_blocks = 64;
  kv_manager<> kv(config);

  const auto system_prompt = tokens(100, 1);  // 6 full blocks + 4 tokens
  auto prompt_for = [&](token_id user) {
    auto p = system_prompt;
    const auto question = tokens(20, user);
    p.insert(p.end(), question.begin(), question.end());
    return p;
  };
  for (std::uint64_t r = 1; r <= 3; ++r) {
    const auto prompt = prompt_for(static_cast<token_id>(10000 * r));
    const auto a = kv.allocate_prompt(request_id(r), prompt);
    std::printf("request %llu: %zu prompt tokens, %zu cached (prefill computes %zu), %zu new blocks\n",
                static_cast<unsigned long long>(r), prompt.size(), a->cached_tokens, prompt.size() - a->cached_tokens,
                a->new_blocks);
    // ... the engine runs the prefill step, then reports it: only now can later prompts hit these blocks.
    kv.computed(request_id(r), prompt.size());
  }
  print_row("request 1", kv.blocks(request_id(1)));
  print_row("request 3", kv.blocks(request_id(3)));
  std::printf("  block %u is shared by %u requests; %zu of %zu blocks in use\n", kv.blocks(request_id(1))[0].value(),
              kv.cache().ref_count(kv.blocks(request_id(1))[0]), kv.used_blocks(), kv.usable_blocks());

  std::printf("\n== 2. parallel sampling: fork, then copy-on-write ==\n");
  kv.fork(request_id(3), request_id(4));
  std::printf("fork 3 -> 4 allocated nothing: %zu blocks in use\n", kv.used_blocks());
  const token_id next = 777;
  const auto r = kv.append(request_id(4), std::span<const token_id>(&next, 1));
  kv.computed(request_id(4), kv.num_tokens(request_id(4)));  // after the decode step ran
  if (r.copy)
    std::printf("sample 4's first token lands in shared partial block %u: engine copies %u -> %u first\n",
                r.copy->src.value(), r.copy->src.value(), r.copy->dst.value());
  std::int64_t slot = 0;
  kv.slot_mapping(request_id(4), kv.num_tokens(request_id(4)) - 1, std::span<std::int64_t>(&slot, 1));
  std::printf("its KV goes to flat slot %lld (block %lld, offset %lld)\n", static_cast<long long>(slot),
              static_cast<long long>(slot / 16), static_cast<long long>(slot % 16));

  const auto out = kv.swap_out(request_id(2));
  std::printf("preempting request 2 to host: %zu blocks in %zu copy unit(s)\n", out->blocks, out->units.size());
  for (std::uint64_t id : {1, 3, 4}) kv.free(request_id(id));
  kv.free(request_id(2));
  std::printf("all freed: %zu blocks in use, %zu still cached for the next conversation turn\n", kv.used_blocks(),
              kv.cache().cached_blocks());
  // The prefix cache spans both tiers: drop every device key, and the swapped-out copy still serves.
  kv.reset_prefix_cache();
  const auto again = kv.allocate_prompt(request_id(5), prompt_for(50000));
  std::printf(
      "device cache reset; request 5 finds %zu blocks in the host tier: %zu tokens cached, copied in by %zu "
      "unit(s)\n",
      again->host_hit_blocks, again->cached_tokens, again->host_to_device.units.size());
  kv.free(request_id(5));

  std::printf("\n== 3. radix cache with a user-written eviction policy ==\n");
  auto scenario = [](auto policy, const char* name) {
    block_pool pool(32);
    radix_cache<decltype(policy)> radix(pool, 16, policy);
    auto insert = [&](const std::vector<token_id>& t) {
      std::vector<block_id> blocks;
      pool.allocate(t.size() / 16, blocks);
      const auto [present, node] = radix.insert(t, blocks);
      for (std::size_t i = 0; i < present; ++i) pool.release(blocks[i]);  // already cached: drop ours
      return node;
    };
    const auto popular = tokens(64, 1), one_off = tokens(64, 5000);
    insert(popular);
    insert(one_off);
    radix.match(popular);
    radix.match(popular);  // popular is reused...
    radix.match(one_off);  // ...one_off is touched most recently, but only once
    radix.evict(4);
    std::printf("%-15s after evicting 4 of %d blocks: popular prefix %2zu tokens cached, one-off %2zu\n", name, 8,
                radix.match(popular).matched_tokens, radix.match(one_off).matched_tokens);
  };
  scenario(second_chance_eviction{}, "second-chance:");
  scenario(lru_eviction{}, "plain LRU:");
  return 0;
}
