// libFuzzer harness: kv/similar_prompt_index.hpp driven by arbitrary bytes (insert, lookup, erase,
// align). weft::error is the expected outcome of bad input; a broken plan or bound traps.
#include <weft/kv/similar_prompt_index.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace {
struct reader {
  const std::uint8_t* p;
  std::size_t n;
  std::uint8_t byte() {
    if (n == 0) return 0;
    --n;
    return *p++;
  }
  std::vector<weft::kv::token_id> tokens() {
    std::vector<weft::kv::token_id> t(byte() % 48);
    for (auto& x : t) x = static_cast<weft::kv::token_id>(byte() % 6);
    return t;
  }
};

void check(bool ok) {
  if (!ok) __builtin_trap();
}

void check_plan(const weft::kv::alignment_plan& plan, const std::vector<weft::kv::token_id>& a,
                std::span<const weft::kv::token_id> b, std::size_t band) {
  check(plan.source_position.size() == a.size() && plan.edit_distance <= band);
  std::int64_t last = -1;
  std::size_t reused = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const std::int64_t s = plan.source_position[i];
    if (s == weft::kv::recompute_position) continue;
    check(s > last && static_cast<std::size_t>(s) < b.size() && a[i] == b[static_cast<std::size_t>(s)]);
    last = s;
    ++reused;
  }
  check(reused == plan.reused);
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  reader in{data, size};
  weft::kv::similar_prompt_options o;
  o.max_prompts = in.byte() % 5;  // 0 is rejected
  o.max_prompt_tokens = 1 + in.byte() % 40;
  o.max_total_tokens = o.max_prompt_tokens + in.byte() % 80;
  o.ngram = 1 + in.byte() % 4;
  o.sketch_size = 1 + in.byte() % 8;
  o.band = in.byte() % 12;  // 0 is rejected
  o.min_reuse_fraction = (in.byte() % 5) / 4.0;
  try {
    weft::kv::similar_prompt_index idx(o);
    while (in.n > 0) {
      const std::uint8_t op = in.byte() % 4;
      const std::uint64_t key = in.byte() % 8;
      const auto t = in.tokens();
      try {
        if (op == 0) {
          (void)idx.insert(key, t);
        } else if (op == 1) {
          if (const auto plan = idx.lookup(t)) check_plan(*plan, t, idx.tokens(plan->source_key), o.band);
        } else if (op == 2) {
          (void)idx.erase(key);
        } else {
          const auto u = in.tokens();
          if (const auto plan = weft::kv::similar_prompt_index::align(t, u, o.band)) check_plan(*plan, t, u, o.band);
        }
      } catch (const weft::error&) {
      }
      check(idx.size() <= o.max_prompts && idx.total_tokens() <= o.max_total_tokens);
    }
  } catch (const weft::error&) {
  }
  return 0;
}
