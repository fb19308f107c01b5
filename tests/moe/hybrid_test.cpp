#include <weft/moe/hybrid_replay.hpp>
#include <weft/moe/hybrid_schedule.hpp>
#include <weft/moe/segment_oracle.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

using namespace weft::moe;

namespace {
// Device: 1 s per expert; CPU: 2 s per token; a load takes 3 s.
hybrid_costs toy_costs() {
  hybrid_costs c;
  c.device_s_per_expert = 1;
  c.cpu_s_per_token = 2;
  c.expert_bytes = 3;
  c.link_bytes_per_s = 1;
  return c;
}
}  // namespace

TEST_CASE("plan_hybrid_layer: fixed mappings and the dynamic choice, worked by hand", "[moe][hybrid]") {
  const std::vector<expert_work> w{{0, 4, false}, {1, 1, false}, {2, 1, true}};
  const layer_plan load = plan_hybrid_layer(w, toy_costs(), hybrid_mode::always_load);
  // device: resident expert 2 (1 s); loads of 0 then 1 end at 3 and 6; computes end at 4 and 7.
  CHECK(load.makespan_s() == 7);
  CHECK(load.where ==
        std::vector<placement>{placement::device_loaded, placement::device_loaded, placement::device_resident});
  const layer_plan cpu = plan_hybrid_layer(w, toy_costs(), hybrid_mode::cpu_for_misses);
  CHECK(cpu.makespan_s() == 10);  // CPU: 4 tokens * 2 + 1 token * 2
  CHECK(cpu.link_busy_s == 0);
  // Dynamic: the 4-token expert is faster loaded (ends at 4 vs 8 on the CPU); the 1-token one is
  // faster on the CPU (ends at 2 vs 7 behind the first load).
  const layer_plan dyn = plan_hybrid_layer(w, toy_costs(), hybrid_mode::dynamic);
  CHECK(dyn.makespan_s() == 4);
  CHECK(dyn.where == std::vector<placement>{placement::device_loaded, placement::cpu, placement::device_resident});
}

TEST_CASE("plan_hybrid_layer rejects bad costs and empty work items", "[moe][hybrid][errors]") {
  hybrid_costs bad = toy_costs();
  bad.cpu_s_per_token = -1;
  const std::vector<expert_work> w{{0, 1, false}};
  CHECK_THROWS_WITH(plan_hybrid_layer(w, bad, hybrid_mode::dynamic), Catch::Contains("finite and >= 0"));
  bad = toy_costs();
  bad.link_bytes_per_s = 0;
  CHECK_THROWS_AS(plan_hybrid_layer(w, bad, hybrid_mode::dynamic), weft::error);
  const std::vector<expert_work> empty{{5, 0, false}};
  CHECK_THROWS_WITH(plan_hybrid_layer(empty, toy_costs(), hybrid_mode::dynamic),
                    Catch::Contains("expert 5 has 0 routed tokens"));
}

TEST_CASE("hybrid_replay: the dynamic mode reduces to a fixed mapping when one resource is hopeless", "[moe][hybrid]") {
  trace_params p;
  p.shape = {4, 16, 2};
  p.num_requests = 6;
  p.tokens_per_request = 24;
  const routing_trace trace = generate_trace(p);
  auto run = [&](hybrid_mode mode, hybrid_costs costs) {
    expert_cache<lru_policy> device(cache_config::in_slots(trace.shape(), 4));
    hybrid_replay_options o;
    o.costs = costs;
    o.mode = mode;
    o.prompt_tokens = 8;
    return hybrid_replay(trace, device, o);
  };
  hybrid_costs c;
  c.device_s_per_expert = 1e-4;
  c.cpu_s_per_token = 1e-3;
  c.expert_bytes = 88e6;
  const hybrid_replay_report load = run(hybrid_mode::always_load, c);
  const hybrid_replay_report cpu = run(hybrid_mode::cpu_for_misses, c);
  const hybrid_replay_report dyn = run(hybrid_mode::dynamic, c);
  CHECK(load.on_cpu == 0);
  CHECK(cpu.device_loaded == 0);
  const std::uint64_t executions = load.device_resident + load.device_loaded + load.on_cpu;
  CHECK(cpu.device_resident + cpu.device_loaded + cpu.on_cpu == executions);  // every routed expert runs once
  CHECK(dyn.device_resident + dyn.device_loaded + dyn.on_cpu == executions);
  CHECK(load.prefill_passes == 6);
  CHECK(load.decode_passes == 6 * 16);
  // Deterministic.
  const hybrid_replay_report again = run(hybrid_mode::dynamic, c);
  CHECK(again.decode_s == dyn.decode_s);
  CHECK(again.prefill_s == dyn.prefill_s);

  hybrid_costs slow_cpu = c;
  slow_cpu.cpu_s_per_token = 1e6;
  const hybrid_replay_report a = run(hybrid_mode::dynamic, slow_cpu), b = run(hybrid_mode::always_load, slow_cpu);
  CHECK(a.decode_s == b.decode_s);
  CHECK(a.prefill_s == b.prefill_s);
  CHECK(a.on_cpu == 0);
  hybrid_costs slow_link = c;
  slow_link.link_bytes_per_s = 1e-3;
  const hybrid_replay_report x = run(hybrid_mode::dynamic, slow_link), y = run(hybrid_mode::cpu_for_misses, slow_link);
  CHECK(x.decode_s == y.decode_s);
  CHECK(x.device_loaded == 0);
}

TEST_CASE("hybrid_replay: a host tier smaller than the model reads misses from storage", "[moe][hybrid]") {
  trace_params p;
  p.shape = {2, 32, 2};
  p.num_requests = 3;
  p.tokens_per_request = 20;
  const routing_trace trace = generate_trace(p);
  hybrid_replay_options o;
  o.costs.cpu_s_per_token = 1e-3;
  o.costs.expert_bytes = 1e6;
  o.warm_start = false;
  expert_cache<lru_policy> d1(cache_config::in_slots(trace.shape(), 2));
  const hybrid_replay_report all_host = hybrid_replay(trace, d1, o);
  CHECK(all_host.storage_reads == 0);
  o.host_experts_per_layer = 4;
  expert_cache<lru_policy> d2(cache_config::in_slots(trace.shape(), 2));
  const hybrid_replay_report tiered = hybrid_replay(trace, d2, o);
  CHECK(tiered.storage_reads > 0);
  CHECK(tiered.decode_s > all_host.decode_s);
  o.host_experts_per_layer = 1;  // cannot hold one token's experts
  expert_cache<lru_policy> d3(cache_config::in_slots(trace.shape(), 2));
  CHECK_THROWS_WITH(hybrid_replay(trace, d3, o), Catch::Contains("cannot hold one token's top_k"));
  o.host_experts_per_layer = 0;
  o.storage_bytes_per_s = 0;
  CHECK_THROWS_AS(hybrid_replay(trace, d3, o), weft::error);
}

TEST_CASE("segment cache oracle (SCH): worked example and properties", "[moe][oracle]") {
  // One layer, 4 experts, top-1, one request routing 0,1,0,1. Segment 2, one slot:
  // t0 window {0,1} ties -> expert 0 first: hit; t1 window {1,0}, 0 used last -> 0 first: miss;
  // t2 window {0,1}, 1 used last -> miss; t3 window {1}: hit. SCH = 2/4.
  routing_trace t({1, 4, 1});
  for (std::uint32_t e : {0u, 1u, 0u, 1u}) t.append(0, std::vector<std::uint32_t>{e});
  const std::vector<double> sch2 = segment_cache_hit_rates(t, 2, 3);
  CHECK(sch2[0] == 0.5);
  CHECK(sch2[1] == 1.0);
  CHECK(segment_cache_hit_rates(t, 1, 1)[0] == 1.0);  // a one-token lookahead sees exactly what is needed

  trace_params p;
  p.shape = {3, 16, 2};
  p.num_requests = 4;
  p.tokens_per_request = 40;
  const routing_trace g = generate_trace(p);
  for (std::uint32_t m : {1u, 4u, 16u}) {
    const std::vector<double> h = segment_cache_hit_rates(g, m, 20);
    for (std::size_t c = 1; c < h.size(); ++c) CHECK(h[c] >= h[c - 1]);
    CHECK(h[15] == 1.0);  // a cache of all 16 experts always hits
    CHECK(h[19] == 1.0);
    if (m == 1) CHECK(h[1] == 1.0);
  }
  // A longer lookahead must serve more tokens with the same slots: never a higher hit rate.
  const auto h4 = segment_cache_hit_rates(g, 4, 8), h16 = segment_cache_hit_rates(g, 16, 8);
  for (std::size_t c = 0; c < 8; ++c) CHECK(h16[c] <= h4[c] + 1e-12);
  CHECK_THROWS_AS(segment_cache_hit_rates(g, 0, 4), weft::error);
  CHECK_THROWS_AS(segment_cache_hit_rates(g, 4, 0), weft::error);
  CHECK_THROWS_AS(segment_cache_hit_rates(routing_trace({1, 4, 1}), 4, 4), weft::error);
}
