// Consumer smoke test: uses weft the way a user's engine would and checks the results.
#include <weft/core.hpp>

#include <cstdio>
#include <vector>

#if defined(WEFT_CONSUMER_HAS_KV)
#include <weft/kv.hpp>
#endif
#if defined(WEFT_CONSUMER_HAS_SCHED)
#include <weft/sched.hpp>
#endif

int main() {
  weft::quantile_histogram h;
  for (int i = 1; i <= 1000; ++i) h.record(i);
  const weft::half x(1.5f);
  const bool ok = h.quantile(0.5) > 490 && h.quantile(0.5) < 510 && static_cast<float>(x) == 1.5f;
  std::printf("weft %s consumer: p50 = %.1f, half(1.5) = %.1f -> %s\n", WEFT_VERSION_STRING, h.p50(),
              static_cast<float>(x), ok ? "ok" : "WRONG");
  if (!ok) return 1;
#if defined(WEFT_CONSUMER_HAS_KV)
  // Two prompts sharing 48 tokens at block size 16: the second reuses 3 cached blocks.
  weft::kv::kv_config config;
  config.num_blocks = 32;
  config.block_size = 16;
  weft::kv::kv_manager<> kv(config);
  std::vector<weft::kv::token_id> prompt(55);
  for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<weft::kv::token_id>(i + 1);
  (void)kv.allocate_prompt(weft::kv::request_id(1), prompt);
  kv.computed(weft::kv::request_id(1), prompt.size());  // the prefill ran: its blocks may be shared now
  prompt.resize(50);
  const auto second = kv.allocate_prompt(weft::kv::request_id(2), prompt);
  std::printf("kv consumer: second prompt has %zu cached tokens -> %s\n", second->cached_tokens,
              second->cached_tokens == 48 ? "ok" : "WRONG");
  if (second->cached_tokens != 48) return 1;
#endif
#if defined(WEFT_CONSUMER_HAS_SCHED)
  // VTC serves the client with the smaller virtual counter first.
  weft::sched::vtc_queue vtc;
  static_assert(weft::sched::fair_queue<weft::sched::vtc_queue>);
  std::printf("sched consumer: vtc_queue empty = %d -> %s\n", vtc.empty() ? 1 : 0, vtc.empty() ? "ok" : "WRONG");
  if (!vtc.empty()) return 1;
#endif
  return 0;
}
