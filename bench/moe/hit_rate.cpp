// Expert-cache benchmark. Part 1: hit rate vs capacity (1x..4x the active experts per layer) for
// every eviction policy, without and with the EAM prefetcher, with Belady's MIN as the ceiling, on
// generated traces (parameters printed and documented in docs/moe.md). Part 2: the cache's decision
// cost per lookup, next to a textbook std::list + std::unordered_map LRU as the peer.
// Writes moe_hit_rate.csv and moe_decision_cost.csv under WEFT_BENCH_OUT (or argv[1]).
#include <weft/moe.hpp>

#include <time.h>
#include <cstdio>
#include <fstream>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

using namespace weft::moe;

namespace {

struct row {
  std::string policy;
  capacity_scope scope;
  bool prefetch;
  std::uint32_t mult;
  double hit_rate = 0, resident_hit_rate = 0, stall_s = 0, gib_moved = 0;
};

template <class P>
replay_report run(const routing_trace& trace, capacity_scope scope, std::uint64_t slots, P policy, bool prefetch,
                  const replay_options& o, std::uint64_t expert_bytes) {
  expert_cache<P> c(cache_config::in_slots(trace.shape(), slots, scope, expert_bytes), std::move(policy));
  if (prefetch) return replay(trace, c, eam_prefetcher{}, o);
  return replay(trace, c, no_prefetch{}, o);
}

// The peer for decision cost: the LRU every engine writes first.
class naive_lru {
 public:
  explicit naive_lru(std::size_t capacity) : capacity_(capacity) {}
  bool access(std::uint64_t key) {
    auto it = map_.find(key);
    if (it != map_.end()) {
      order_.splice(order_.begin(), order_, it->second);
      return true;
    }
    if (map_.size() == capacity_) {
      map_.erase(order_.back());
      order_.pop_back();
    }
    order_.push_front(key);
    map_[key] = order_.begin();
    return false;
  }

 private:
  std::size_t capacity_;
  std::list<std::uint64_t> order_;
  std::unordered_map<std::uint64_t, std::list<std::uint64_t>::iterator> map_;
};

// Thread CPU time: the build machine is shared, and wall time would count other people's jobs.
double cpu_now() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}
double seconds_since(double t0) { return cpu_now() - t0; }

}  // namespace

int main(int argc, char** argv) {
  const std::string out_dir = argc > 1 ? argv[1] : WEFT_BENCH_OUT;
  const std::uint64_t expert_bytes = 16ull << 20;  // 16 MiB: a 64-expert, 2k-hidden FFN expert in bf16
  replay_options o;
  o.bandwidth_bytes_per_s = 25e9;  // PCIe 4.0 x16
  o.compute_s_per_layer = 0.7e-3;  // time one decode layer computes (attention + 2 experts)
  o.prefetch_depth = 1;
  const std::vector<std::uint64_t> seeds{1, 2, 3};
  trace_params base;  // defaults: see trace.hpp
  std::printf(
      "trace: %u layers, %u experts, top-%u; %u requests x %u tokens; zipf %.2f; %u topics; reuse %.2f; "
      "layer correlation %.2f; seeds 1..%zu\n",
      base.shape.num_layers, base.shape.num_experts, base.shape.top_k, base.num_requests, base.tokens_per_request,
      base.zipf_s, base.num_topics, base.reuse, base.layer_correlation, seeds.size());
  std::printf("cost model: expert %llu MiB, %.0f GB/s host-to-device, %.2f ms compute per layer, prefetch depth %u\n",
              static_cast<unsigned long long>(expert_bytes >> 20), o.bandwidth_bytes_per_s / 1e9,
              o.compute_s_per_layer * 1e3, o.prefetch_depth);

  std::vector<row> rows;
  capacity_scope scope = capacity_scope::per_layer;
  auto add = [&](const std::string& name, bool prefetch, std::uint32_t mult, const replay_report& r, double w) {
    for (row& x : rows)
      if (x.policy == name && x.scope == scope && x.prefetch == prefetch && x.mult == mult) {
        x.hit_rate += r.hit_rate() * w;
        x.resident_hit_rate += r.resident_hit_rate() * w;
        x.stall_s += r.stall_s * w;
        x.gib_moved += static_cast<double>(r.bytes_moved) / (1ull << 30) * w;
        return;
      }
    rows.push_back({name, scope, prefetch, mult, r.hit_rate() * w, r.resident_hit_rate() * w, r.stall_s * w,
                    static_cast<double>(r.bytes_moved) / (1ull << 30) * w});
  };
  const double w = 1.0 / static_cast<double>(seeds.size());
  for (const std::uint64_t seed : seeds) {
    trace_params p = base;
    p.seed = seed;
    const routing_trace trace = generate_trace(p);
    const auto future = std::make_shared<const belady_future>(trace.shape(), trace.lookups());
    for (const capacity_scope sc : {capacity_scope::per_layer, capacity_scope::global}) {
      scope = sc;
      for (std::uint32_t mult = 1; mult <= 4; ++mult) {
        // Same total memory in both scopes: mult x top_k experts per layer.
        const std::uint64_t slots =
            std::uint64_t{mult} * p.shape.top_k * (sc == capacity_scope::global ? p.shape.num_layers : 1);
        add("belady", false, mult, run(trace, sc, slots, belady_policy(future), false, o, expert_bytes), w);
        for (const bool pf : {false, true}) {
          add("lru", pf, mult, run(trace, sc, slots, lru_policy{}, pf, o, expert_bytes), w);
          add("lfu", pf, mult, run(trace, sc, slots, lfu_policy{}, pf, o, expert_bytes), w);
          add("lfu_decay", pf, mult, run(trace, sc, slots, lfu_decay_policy{0.999}, pf, o, expert_bytes), w);
          add("activation_aware", pf, mult, run(trace, sc, slots, activation_aware_policy{}, pf, o, expert_bytes), w);
          add("least_stale", pf, mult, run(trace, sc, slots, least_stale_policy{}, pf, o, expert_bytes), w);
        }
      }
    }
  }
  auto belady_at = [&](capacity_scope sc, std::uint32_t mult) {
    for (const row& x : rows)
      if (x.policy == "belady" && x.scope == sc && x.mult == mult) return x.hit_rate;
    return 0.0;
  };
  std::ofstream csv(out_dir + "/moe_hit_rate.csv");
  csv << "scope,policy,prefetch,capacity_x_active,slots_per_layer,hit_rate,resident_hit_rate,belady_hit_rate,"
         "ratio_to_belady,stall_s,gib_moved\n";
  std::printf("\n%-9s %-18s %-9s %4s %9s %9s %10s %9s %9s\n", "scope", "policy", "prefetch", "cap", "hit", "resident",
              "/belady", "stall_s", "GiB");
  for (const row& x : rows) {
    const double ratio = x.hit_rate / belady_at(x.scope, x.mult);
    const char* sc = x.scope == capacity_scope::global ? "global" : "per_layer";
    std::printf("%-9s %-18s %-9s %3ux %9.4f %9.4f %10.3f %9.3f %9.1f\n", sc, x.policy.c_str(),
                x.prefetch ? "eam" : "none", x.mult, x.hit_rate, x.resident_hit_rate, ratio, x.stall_s, x.gib_moved);
    csv << sc << ',' << x.policy << ',' << (x.prefetch ? "eam" : "none") << ',' << x.mult << ','
        << x.mult * base.shape.top_k << ',' << x.hit_rate << ',' << x.resident_hit_rate << ','
        << belady_at(x.scope, x.mult) << ',' << ratio << ',' << x.stall_s << ',' << x.gib_moved << '\n';
  }
  // Target: the best online policy with prefetch within 10% of Belady at 2x.
  for (const capacity_scope sc : {capacity_scope::per_layer, capacity_scope::global}) {
    double best = 0, best_resident = 0;
    std::string best_name;
    for (const row& x : rows)
      if (x.scope == sc && x.prefetch && x.mult == 2 && x.hit_rate > best)
        best = x.hit_rate, best_resident = x.resident_hit_rate, best_name = x.policy;
    const double ceiling = belady_at(sc, 2);
    std::printf(
        "at 2x active, %s capacity: best online+prefetch %s %.4f (resident-only %.4f) vs Belady %.4f: "
        "ratio %.3f (resident-only %.3f); target >= 0.90: %s\n",
        sc == capacity_scope::global ? "global" : "per-layer", best_name.c_str(), best, best_resident, ceiling,
        best / ceiling, best_resident / ceiling, best / ceiling >= 0.9 ? "met" : "MISSED");
  }

  // ---- decision cost per lookup ---------------------------------------------------------------
  trace_params p = base;
  p.num_requests = 200;
  const routing_trace trace = generate_trace(p);
  const std::vector<expert_key> keys = trace.lookups();
  std::ofstream cost_csv(out_dir + "/moe_decision_cost.csv");
  cost_csv << "regime,policy,ns_per_lookup,peer_ns_per_lookup,ratio\n";
  std::printf("\ndecision cost per lookup (thread CPU time, best of 5) over %zu lookups, per-layer pools:\n",
              keys.size());
  auto time_cache = [&](auto policy, std::uint64_t slots) {
    using P = decltype(policy);
    double best_s = 1e9;
    std::uint64_t sink = 0;
    for (int rep = 0; rep < 5; ++rep) {
      expert_cache<P> c(cache_config::in_slots(trace.shape(), slots), policy);
      const double t0 = cpu_now();
      for (const expert_key k : keys) {
        const lookup_result r = c.lookup(k);
        if (r.status == lookup_status::miss) {
          const auto order = c.start_load(k);
          sink += order->slot;
          c.complete(*order);
        }
      }
      best_s = std::min(best_s, seconds_since(t0));
      sink += c.stats().hits;
    }
    if (sink == 42) std::printf(" ");
    return best_s / static_cast<double>(keys.size()) * 1e9;
  };
  auto time_peer = [&](std::size_t slots) {
    double best_ns = 1e9;
    for (int rep = 0; rep < 5; ++rep) {
      std::vector<naive_lru> layers(p.shape.num_layers, naive_lru(slots));
      std::uint64_t hits = 0;
      const double t0 = cpu_now();
      for (const expert_key k : keys) hits += layers[k.layer].access(k.expert);
      best_ns = std::min(best_ns, seconds_since(t0) / static_cast<double>(keys.size()) * 1e9);
      if (hits == 42) std::printf(" ");
    }
    return best_ns;
  };
  const std::uint64_t active2 = 2 * p.shape.top_k, all = p.shape.num_experts;
  for (const std::uint64_t slots : {all, active2}) {
    const double peer_ns = time_peer(slots);
    const char* regime = slots == all ? "all hits (capacity = every expert)" : "capacity 2x active (misses included)";
    std::printf("  %s; peer std::list+unordered_map LRU: %.1f ns\n", regime, peer_ns);
    auto report = [&](const char* name, double ns) {
      std::printf("    %-28s %7.1f ns  ratio to peer %.2f  target < 100 ns: %s\n", name, ns, ns / peer_ns,
                  ns < 100 ? "met" : "MISSED");
      cost_csv << regime << ',' << name << ',' << ns << ',' << peer_ns << ',' << ns / peer_ns << '\n';
    };
    report("lru", time_cache(lru_policy{}, slots));
    report("lfu", time_cache(lfu_policy{}, slots));
    report("lfu_decay", time_cache(lfu_decay_policy{0.999}, slots));
    report("activation_aware", time_cache(activation_aware_policy{}, slots));
    report("least_stale", time_cache(least_stale_policy{}, slots));
    report("any_expert_eviction_policy(lru)", time_cache(any_expert_eviction_policy(lru_policy{}), slots));
    const auto future = std::make_shared<const belady_future>(trace.shape(), keys);
    report("belady (offline)", time_cache(belady_policy(future), slots));
  }
  // ---- Part 3: the segment-level oracle (SCH, Liang et al. 2025) beside Belady and LRU ------------
  // The paper finds that for most models a cache of about 2x the active experts captures most of the
  // benefit: SCH rises steeply up to 2x and flattens after. Checked here on the generated traces.
  std::ofstream sch_csv(out_dir + "/moe_sch.csv");
  sch_csv << "segment,capacity_x_active,sch,belady,lru\n";
  std::printf("\nsegment cache oracle SCH(m, cap) vs Belady and LRU (per-layer caches, mean of seeds 1..%zu):\n",
              seeds.size());
  std::printf("%4s %4s %8s %8s %8s\n", "m", "cap", "SCH", "Belady", "LRU");
  // SCH's, Belady's and LRU's hit rates at 1x..4x the active experts per layer, weighted by w, added up.
  const auto add_hit_rates = [&](const routing_trace& trace, std::uint32_t m, std::vector<double>& sch,
                                 std::vector<double>& bel, std::vector<double>& lru) {
    const auto h = segment_cache_hit_rates(trace, m, 4 * trace.shape().top_k);
    const auto future = std::make_shared<const belady_future>(trace.shape(), trace.lookups());
    for (std::uint32_t mult = 1; mult <= 4; ++mult) {
      const std::uint64_t slots = std::uint64_t{mult} * trace.shape().top_k;
      sch[mult - 1] += h[slots - 1] * w;
      bel[mult - 1] += run(trace, capacity_scope::per_layer, slots, belady_policy(future), false, o, expert_bytes)
                           .resident_hit_rate() *
                       w;
      lru[mult - 1] +=
          run(trace, capacity_scope::per_layer, slots, lru_policy{}, false, o, expert_bytes).resident_hit_rate() * w;
    }
  };
  for (const std::uint32_t m : {8u, 16u, 32u}) {
    std::vector<double> sch(4, 0.0), bel(4, 0.0), lru(4, 0.0);
    for (const std::uint64_t seed : seeds) {
      trace_params tp = base;
      tp.seed = seed;
      const routing_trace trace = generate_trace(tp);
      add_hit_rates(trace, m, sch, bel, lru);
    }
    for (std::uint32_t mult = 1; mult <= 4; ++mult) {
      std::printf("%4u %3ux %8.3f %8.3f %8.3f\n", m, mult, sch[mult - 1], bel[mult - 1], lru[mult - 1]);
      sch_csv << m << ',' << mult << ',' << sch[mult - 1] << ',' << bel[mult - 1] << ',' << lru[mult - 1] << '\n';
    }
    const double gain12 = sch[1] - sch[0], gain24 = sch[3] - sch[1];
    std::printf("     SCH gain 1x->2x %+.3f, 2x->4x %+.3f: %s\n", gain12, gain24,
                gain12 > gain24 ? "the knee is at or below 2x (agrees with the paper)"
                                : "2x is not the knee here (disagrees with the paper)");
  }

  // ---- Part 3b: the same on routing with Mixtral-8x7B's published locality ------------------------
  // mixtral_trace_params: 32 layers, 8 experts, top-2, uniform popularity, per-layer reuse fitted to the
  // first-choice repetition of Jiang et al. 2024, Table 5 (trace.hpp). Capacity 1x..4x of the 2 active
  // experts per layer is 2..8 of 8: 4x holds every expert.
  {
    std::printf(
        "\nrouting with Mixtral-8x7B's published locality (mixtral_trace_params: 24 requests x 256 tokens, "
        "seeds 1..%zu)\n",
        seeds.size());
    std::vector<repetition> rep(32);
    for (const std::uint64_t seed : seeds) {
      const auto r = consecutive_repetition(generate_trace(mixtral_trace_params(24, 256, seed)));
      for (std::size_t l = 0; l < r.size(); ++l) {
        rep[l].first_choice += r[l].first_choice * w;
        rep[l].any_choice += r[l].any_choice * w;
      }
    }
    const std::uint32_t at[3] = {0, 15, 31};
    std::printf("repetition between consecutive tokens, generated vs published (Table 5, mean of 8 Pile subsets):\n");
    for (std::size_t i = 0; i < 3; ++i)
      std::printf("  layer %2u: first choice %.3f (paper %.3f), first or second %.3f (paper %.3f)\n", at[i],
                  rep[at[i]].first_choice, mixtral_first_choice_repetition[i], rep[at[i]].any_choice,
                  mixtral_any_choice_repetition[i]);
    std::printf("%4s %4s %8s %8s %8s\n", "m", "cap", "SCH", "Belady", "LRU");
    for (const std::uint32_t m : {8u, 16u, 32u}) {
      std::vector<double> sch(4, 0.0), bel(4, 0.0), lru(4, 0.0);
      for (const std::uint64_t seed : seeds) {
        const routing_trace trace = generate_trace(mixtral_trace_params(24, 256, seed));
        add_hit_rates(trace, m, sch, bel, lru);
      }
      for (std::uint32_t mult = 1; mult <= 4; ++mult) {
        std::printf("%4u %3ux %8.3f %8.3f %8.3f\n", m, mult, sch[mult - 1], bel[mult - 1], lru[mult - 1]);
        sch_csv << "mixtral-" << m << ',' << mult << ',' << sch[mult - 1] << ',' << bel[mult - 1] << ','
                << lru[mult - 1] << '\n';
      }
      const double gain12 = sch[1] - sch[0], gain24 = sch[3] - sch[1];
      std::printf("     SCH gain 1x->2x %+.3f, 2x->4x %+.3f: %s\n", gain12, gain24,
                  gain12 > gain24 ? "the knee is at or below 2x (agrees with the paper)"
                                  : "2x is not the knee here (disagrees with the paper)");
    }
  }

  // ---- Part 3c: ablation, locality and granularity ----------------------------------------------------
  // With 8 experts, 4x the 2 active ones is the whole layer, so the 2x->4x gain is as large as it can be.
  // On 64 experts, top-6 (DeepSeek-MoE's granularity), 1x..4x = 6..24 of 64 experts and 4x no longer holds
  // the layer; the per-layer reuse probability is Mixtral's fit, then stronger (0.5, 0.8 in every layer),
  // then 0.5 with skewed expert popularity (Zipf 1). SCH with m = 16. An assumption: fine-grained models'
  // own locality is not in weft's data.
  {
    std::printf(
        "\nablation: SCH(16) on 64 experts, top-6, by locality (24 requests x 256 tokens, seeds 1..%zu)\n%-24s %8s "
        "%8s %8s %8s   %s\n",
        seeds.size(), "per-layer reuse", "1x", "2x", "3x", "4x", "");
    struct locality {
      const char* name;
      double reuse, zipf;
    };
    for (const locality x : {locality{"Mixtral's fit (0.02-0.16)", -1.0, 0.0}, locality{"0.5", 0.5, 0.0},
                             locality{"0.8", 0.8, 0.0}, locality{"0.5, Zipf(1) popularity", 0.5, 1.0}}) {
      const double reuse = x.reuse;
      std::vector<double> sch(4, 0.0), bel(4, 0.0), lru(4, 0.0);
      for (const std::uint64_t seed : seeds) {
        trace_params fine = mixtral_trace_params(24, 256, seed);
        fine.shape = {32, 64, 6};
        fine.zipf_s = x.zipf;
        if (reuse >= 0) fine.layer_reuse.assign(32, reuse);
        add_hit_rates(generate_trace(fine), 16, sch, bel, lru);
      }
      std::printf("%-24s %8.3f %8.3f %8.3f %8.3f   per-step gains %+.3f %+.3f %+.3f, 2x holds %.0f%% of 4x's hits\n",
                  x.name, sch[0], sch[1], sch[2], sch[3], sch[1] - sch[0], sch[2] - sch[1], sch[3] - sch[2],
                  100 * sch[1] / sch[3]);
      for (std::uint32_t mult = 1; mult <= 4; ++mult)
        sch_csv << "fine64-reuse" << (reuse < 0 ? std::string("mixtral") : std::to_string(reuse)) << "-16," << mult
                << ',' << sch[mult - 1] << ',' << bel[mult - 1] << ',' << lru[mult - 1] << '\n';
    }
  }

  // ---- Part 4: HybriMoE's dynamic CPU-GPU placement vs fixed mappings (a simulator) ---------------
  // Mixtral-8x7B-shaped routing (32 layers, 8 experts, top-2) with int4 experts (3 x 4096 x 14336
  // weights, 88 MB), an RTX A6000-class device (768 GB/s), PCIe 4 x16 (25 GB/s) and a 32-core
  // AVX-512 host (about 100 GB/s, 2 TFLOP/s). Costs are rooflines of those numbers (docs/moe.md);
  // the device holds 4 of 8 experts per layer. HybriMoE reports 1.70x decode and 1.33x prefill over
  // kTransformers (which computes every non-resident expert on the CPU).
  std::ofstream hy_csv(out_dir + "/moe_hybrid.csv");
  hy_csv << "mode,policy,decode_ms_per_token,prefill_s_per_request,resident,loaded,cpu\n";
  hybrid_replay_options ho;
  ho.costs.expert_bytes = 3.0 * 4096 * 14336 * 0.5;
  ho.costs.device_s_per_expert = ho.costs.expert_bytes / 768e9;
  ho.costs.device_s_per_token = 2.0 * 3 * 4096 * 14336 / 150e12;
  ho.costs.cpu_s_per_expert = ho.costs.expert_bytes / 100e9;
  ho.costs.cpu_s_per_token = 2.0 * 3 * 4096 * 14336 / 2e12;
  ho.costs.link_bytes_per_s = 25e9;
  ho.prompt_tokens = 256;
  trace_params mix = base;
  mix.shape = {32, 8, 2};
  mix.num_requests = 8;
  mix.tokens_per_request = 256 + 64;
  std::printf(
      "\nHybriMoE-style CPU-GPU placement (simulated; Mixtral-8x7B shape, int4 experts, 4 of 8 per layer on "
      "the device; %u-token prompts, %u decoded tokens; mean of seeds 1..%zu):\n",
      ho.prompt_tokens, mix.tokens_per_request - ho.prompt_tokens, seeds.size());
  std::printf("%-16s %-6s %12s %14s %9s %9s %9s\n", "mode", "cache", "decode ms/tok", "prefill s/req", "resident",
              "loaded", "cpu");
  const char* mode_names[3] = {"always_load", "cpu_for_misses", "dynamic"};
  for (const bool published : {false, true}) {
    double decode_ms[3][2] = {}, prefill_s[3][2] = {};
    if (published) std::printf("the same on routing with Mixtral-8x7B's published locality (mixtral_trace_params):\n");
    for (int mode = 0; mode < 3; ++mode) {
      for (int pol = 0; pol < 2; ++pol) {
        double resident = 0, loaded = 0, cpu = 0;
        for (const std::uint64_t seed : seeds) {
          mix.seed = seed;
          const routing_trace trace =
              generate_trace(published ? mixtral_trace_params(mix.num_requests, mix.tokens_per_request, seed) : mix);
          ho.mode = static_cast<hybrid_mode>(mode);
          const auto cfg = cache_config::in_slots(trace.shape(), 4);
          hybrid_replay_report r;
          if (pol == 0) {
            expert_cache<lru_policy> c(cfg);
            r = hybrid_replay(trace, c, ho);
          } else {
            expert_cache<lfu_decay_policy> c(cfg);
            r = hybrid_replay(trace, c, ho);
          }
          decode_ms[mode][pol] += r.decode_s_per_token() * 1e3 * w;
          prefill_s[mode][pol] += r.prefill_s / static_cast<double>(r.prefill_passes) * w;
          resident += static_cast<double>(r.device_resident) * w;
          loaded += static_cast<double>(r.device_loaded) * w;
          cpu += static_cast<double>(r.on_cpu) * w;
        }
        const char* pname = pol == 0 ? "lru" : "lfu-d";
        std::printf("%-16s %-6s %12.2f %14.3f %9.0f %9.0f %9.0f\n", mode_names[mode], pname, decode_ms[mode][pol],
                    prefill_s[mode][pol], resident, loaded, cpu);
        hy_csv << mode_names[mode] << (published ? "-published" : "") << ',' << pname << ',' << decode_ms[mode][pol]
               << ',' << prefill_s[mode][pol] << ',' << resident << ',' << loaded << ',' << cpu << '\n';
      }
    }
    std::printf(
        "dynamic (lfu-decay, HybriMoE's score-based caching stand-in) vs cpu_for_misses (kTransformers): decode "
        "%.2fx (paper 1.70x), prefill %.2fx (paper 1.33x); vs always_load: decode %.2fx, prefill %.2fx\n",
        decode_ms[1][1] / decode_ms[2][1], prefill_s[1][1] / prefill_s[2][1], decode_ms[0][1] / decode_ms[2][1],
        prefill_s[0][1] / prefill_s[2][1]);
  }

  // Ablation: per-layer placement gains in decode only where a single token's expert is faster to load
  // than to compute on the host. The host's memory bandwidth (what a 1-token CPU expert costs) and the
  // link's are swept; everything else as above, default traces, LFU-decay.
  std::printf(
      "\nablation, decode ms/token, kTransformers (cpu_for_misses) / HybriMoE (dynamic), by host memory bandwidth "
      "and link:\n%-22s %14s %14s %14s\n",
      "host GB/s (CPU expert)", "PCIe 4, 25", "PCIe 5, 64", "NVLink-C2C 450");
  std::ofstream ab_csv(out_dir + "/moe_hybrid_ablation.csv");
  ab_csv << "host_gb_s,link_gb_s,cpu_for_misses_ms_per_token,dynamic_ms_per_token\n";
  for (const double host : {100e9, 50e9, 25e9}) {
    std::printf("%-22.0f", host / 1e9);
    for (const double link : {25e9, 64e9, 450e9}) {
      hybrid_replay_options a = ho;
      a.costs.cpu_s_per_expert = a.costs.expert_bytes / host;
      a.costs.link_bytes_per_s = link;
      double ms[2] = {};
      for (int k = 0; k < 2; ++k)
        for (const std::uint64_t seed : seeds) {
          mix.seed = seed;
          const routing_trace trace = generate_trace(mix);
          a.mode = k == 0 ? hybrid_mode::cpu_for_misses : hybrid_mode::dynamic;
          expert_cache<lfu_decay_policy> c(cache_config::in_slots(trace.shape(), 4));
          ms[k] += hybrid_replay(trace, c, a).decode_s_per_token() * 1e3 * w;
        }
      std::printf(" %6.1f/%5.1f=%.2fx", ms[0], ms[1], ms[0] / ms[1]);
      ab_csv << host / 1e9 << ',' << link / 1e9 << ',' << ms[0] << ',' << ms[1] << '\n';
    }
    std::printf("\n");
  }
  std::printf("(paper: 1.70x decode; per-layer placement alone gains only where loading beats the host)\n");

  std::printf(
      "\nwrote %s/moe_hit_rate.csv and %s/moe_decision_cost.csv, moe_sch.csv, moe_hybrid.csv, "
      "moe_hybrid_ablation.csv\n",
      out_dir.c_str(), out_dir.c_str());
  return 0;
}
