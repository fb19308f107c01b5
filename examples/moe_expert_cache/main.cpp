// weft::moe in one program: an engine's view of the expert cache.
//  1. The asynchronous load protocol, step by step (lookup -> start_load -> copy -> complete).
//  2. A user-written eviction policy ("protect the hot set"), plugged in by satisfying
//     weft::moe::eviction_policy, compared with LRU, activation-aware caching and Belady's optimum
//     on a generated routing trace, with and without the MoE-Infinity-style prefetcher.
// Usage: moe_expert_cache [policy]   where policy is lru | lfu | hot_set (default: all)
#include <weft/moe.hpp>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace moe = weft::moe;

// A user's policy: never evict one of the `protect` most frequently used experts of a pool while
// another candidate exists; among the rest, evict the least recently used. (A segmented LRU: the
// hot experts of a Zipf-skewed router stay, the cold ones churn.) Only the five concept members
// are needed; victim scans the candidates, so keep `protect` small.
class hot_set_policy {
 public:
  explicit hot_set_policy(std::uint32_t protect) : protect_(protect) {}

  void bind(const moe::model_shape& shape) {
    shape_ = shape;
    uses_.assign(shape.num_keys(), 0);
    last_.assign(shape.num_keys(), 0);
    candidates_.clear();
  }
  void on_access(moe::expert_key k, const moe::access_info&) {
    ++uses_[shape_.index(k)];
    last_[shape_.index(k)] = ++clock_;
  }
  void on_insert(moe::expert_key k, const moe::access_info&) {
    candidates_.push_back(k);
    last_[shape_.index(k)] = ++clock_;
  }
  void on_remove(moe::expert_key k) { std::erase(candidates_, k); }
  std::optional<moe::expert_key> victim(const moe::access_info&) const {
    if (candidates_.empty()) return std::nullopt;
    std::optional<moe::expert_key> coldest;
    for (const auto& k : candidates_) {
      // How many candidates are used more often than k? Fewer than protect_ means k is hot.
      std::uint32_t hotter = 0;
      for (const auto& o : candidates_) hotter += uses_[shape_.index(o)] > uses_[shape_.index(k)];
      if (hotter < protect_ && candidates_.size() > protect_) continue;
      if (!coldest || last_[shape_.index(k)] < last_[shape_.index(*coldest)]) coldest = k;
    }
    return coldest ? coldest : candidates_.front();
  }

 private:
  std::uint32_t protect_;
  moe::model_shape shape_{};
  std::vector<std::uint64_t> uses_, last_;
  std::vector<moe::expert_key> candidates_;
  std::uint64_t clock_ = 0;
};
static_assert(moe::eviction_policy<hot_set_policy>);

int main(int argc, char** argv) {
  const std::string only = argc > 1 ? argv[1] : "";

  // ---- 1. the load protocol -------------------------------------------------------------------
  std::printf("1. the asynchronous load protocol (2 layers x 4 experts, 2 slots per layer)\n");
  moe::expert_cache<> cache(moe::cache_config::in_slots({2, 4, 2}, 2));
  const moe::expert_key k{0, 3};
  auto found = cache.lookup(k);
  std::printf("   lookup (layer 0, expert 3): %s\n", found.status == moe::lookup_status::miss ? "miss" : "?");
  const std::optional<moe::load_order> order = cache.start_load(k);
  std::printf("   start_load -> copy %llu byte(s) into slot %u of pool %u\n",
              static_cast<unsigned long long>(order->bytes), order->slot, order->pool);
  found = cache.lookup(k);
  std::printf("   lookup while copying: %s (do not start a second copy)\n",
              found.status == moe::lookup_status::in_flight ? "in flight" : "?");
  cache.complete(*order);  // the engine's copy stream finished (the order's ticket names this load)
  std::printf("   after complete(): %s in slot %u\n", cache.lookup(k).status == moe::lookup_status::hit ? "hit" : "?",
              cache.lookup(k).slot);
  try {
    cache.complete({1, 2}, order->ticket);
  } catch (const weft::error& e) {
    std::printf("   completing a load never started is an error:\n     %s\n", e.what());
  }
  // A load cancelled and restarted gets a new ticket, so the old copy's late completion is refused.
  const moe::expert_key j{1, 1};
  const std::optional<moe::load_order> first = cache.start_load(j);
  cache.cancel(*first);
  const std::optional<moe::load_order> second = cache.start_load(j);
  try {
    cache.complete(*first);
  } catch (const weft::error& e) {
    std::printf("   a stale completion (cancelled ticket %llu) is refused:\n     %s\n",
                static_cast<unsigned long long>(first->ticket), e.what());
  }
  cache.complete(*second);

  // ---- 2. policies on a generated trace ---------------------------------------------------------
  moe::trace_params p;  // 16 layers, 64 experts, top-2, Zipf 0.9, reuse 0.35, layer correlation 0.35
  p.num_requests = 12;
  const moe::routing_trace trace = moe::generate_trace(p);
  const auto future = std::make_shared<const moe::belady_future>(trace.shape(), trace.lookups());
  moe::replay_options o;  // 25 GB/s, 0.7 ms compute per layer (see docs/moe.md)
  o.compute_s_per_layer = 0.7e-3;
  const std::uint64_t slots = 2 * p.shape.top_k, bytes = 16ull << 20;
  std::printf("\n2. %zu tokens x %u layers, %llu slots per layer (2x the active experts), 16 MiB experts\n",
              trace.num_tokens(), p.shape.num_layers, static_cast<unsigned long long>(slots));
  std::printf("   %-34s %9s %10s %9s\n", "policy", "hit rate", "stall (s)", "GiB moved");
  auto show = [&](const char* name, const moe::replay_report& r) {
    std::printf("   %-34s %9.3f %10.2f %9.1f\n", name, r.hit_rate(), r.stall_s,
                static_cast<double>(r.bytes_moved) / (1ull << 30));
  };
  auto config = moe::cache_config::in_slots(trace.shape(), slots, moe::capacity_scope::per_layer, bytes);
  // Run-time choice through any_eviction_policy; the template parameter works the same way.
  std::vector<std::pair<std::string, moe::any_eviction_policy>> policies{
      {"lru", moe::lru_policy{}}, {"lfu", moe::lfu_policy{}}, {"hot_set", hot_set_policy{1}}};
  for (auto& [name, policy] : policies) {
    if (!only.empty() && only != name) continue;
    moe::expert_cache<moe::any_eviction_policy> c(config, policy);
    show(name.c_str(), moe::replay(trace, c, moe::no_prefetch{}, o));
    moe::expert_cache<moe::any_eviction_policy> f(config, policy);
    show((name + " + EAM prefetch").c_str(), moe::replay(trace, f, moe::eam_prefetcher{}, o));
  }
  moe::expert_cache<moe::belady_policy> best(config, moe::belady_policy(future));
  show("belady (offline optimum, no prefetch)", moe::replay(trace, best, moe::no_prefetch{}, o));
  std::printf("\nA hit is a lookup that started no load; prefetching trades bytes moved for stall time.\n");
  return 0;
}
