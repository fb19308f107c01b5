// build_paged_attention_inputs: the vLLM and FlashInfer arrays of a batch, checked by hand on a small
// batch, against the KV manager on every batch of a workload with preemptions, forks and layered
// prefill, and refused for a batch the KV manager does not hold. (The mini engine's forward pass reads
// its KV through these arrays and equals the dense model: tests/sched/mini_engine_test.cpp.)
#include "harness.hpp"

#include <weft/kv/kv_manager.hpp>
#include <weft/sched/iteration_scheduler.hpp>
#include <weft/sched/layered_prefill.hpp>
#include <weft/sched/paged_attention_inputs.hpp>

#include <catch2/catch.hpp>

#include <map>
#include <numeric>
#include <vector>

using namespace weft::sched;

namespace {

std::vector<token_id> ids_from(token_id first, std::size_t n) {
  std::vector<token_id> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

request pa_request(std::uint64_t id, std::span<const token_id> ids) {
  request r;
  r.id = request_id(id);
  r.client = client_id(1);
  r.prompt = ids;
  r.prompt_tokens = static_cast<std::int64_t>(ids.size());
  return r;
}

// Every array against the batch and the KV manager, computed the plain way.
template <class KV>
void check_against(const batch& b, const KV& kv, const paged_attention_inputs& in) {
  const auto bs = static_cast<std::int64_t>(kv.block_size());
  REQUIRE(in.query_start_loc.size() == b.entries.size() + 1);
  REQUIRE(in.kv_indptr.size() == b.entries.size() + 1);
  CHECK(in.num_tokens == b.tokens());
  CHECK(static_cast<std::int64_t>(in.slot_mapping.size()) == b.tokens());
  for (std::size_t k = 0; k < b.entries.size(); ++k) {
    const batch_entry& e = b.entries[k];
    const auto blocks = kv.blocks(e.id);
    CHECK(in.query_start_loc[k + 1] - in.query_start_loc[k] == e.prefill_tokens + e.decode_tokens);
    CHECK(in.seq_lens[k] == e.context_tokens);
    const std::int64_t used = (e.context_tokens + bs - 1) / bs;
    CHECK(in.kv_indptr[k + 1] - in.kv_indptr[k] == used);
    CHECK(in.kv_last_page_len[k] == e.context_tokens - (used - 1) * bs);
    for (std::int64_t j = 0; j < in.max_blocks; ++j) {
      const std::int32_t cell =
          in.block_table[k * static_cast<std::size_t>(in.max_blocks) + static_cast<std::size_t>(j)];
      CHECK(cell == (j < used ? static_cast<std::int32_t>(blocks[static_cast<std::size_t>(j)].value()) : 0));
      if (j < used) CHECK(in.kv_indices[static_cast<std::size_t>(in.kv_indptr[k] + j)] == cell);
    }
    for (std::int64_t p = e.first_position(); p < e.context_tokens; ++p) {
      const auto t = static_cast<std::size_t>(in.query_start_loc[k] + (p - e.first_position()));
      CHECK(in.positions[t] == p);
      CHECK(in.slot_mapping[t] ==
            static_cast<std::int64_t>(blocks[static_cast<std::size_t>(p / bs)].value()) * bs + p % bs);
      const auto ids = kv.tokens(e.id);
      if (e.decode_tokens > 0)
        CHECK(in.input_ids[t] == e.token);
      else if (!ids.empty())
        CHECK(in.input_ids[t] == ids[static_cast<std::size_t>(p)]);
      else
        CHECK(in.input_ids[t] == -1);
    }
    CHECK(in.logits_indices[k] == (e.emits_token ? in.query_start_loc[k + 1] - 1 : -1));
  }
}

}  // namespace

TEST_CASE("paged-attention inputs of a small batch, by hand", "[sched][paged_attention]") {
  iteration_scheduler<> s(chunked_prefill(48, 4), fcfs_queue{}, weft_test::kv_of(64));
  const auto a = ids_from(100, 40), c = ids_from(500, 20);
  REQUIRE(s.submit(pa_request(1, a), 0.0));
  REQUIRE(s.submit(pa_request(2, c), 0.0));
  const batch& b = s.schedule(0.0);  // request 1's 40-token prompt, then 8 of request 2's 20
  REQUIRE(b.entries.size() == 2);
  const paged_attention_inputs in = make_paged_attention_inputs(b, s.kv());
  CHECK(in.block_size == 16);
  CHECK(in.query_start_loc == std::vector<std::int32_t>{0, 40, 48});
  CHECK(in.seq_lens == std::vector<std::int32_t>{40, 8});
  CHECK(in.max_query_len == 40);
  CHECK(in.max_seq_len == 40);
  CHECK(in.max_blocks == 3);
  CHECK(in.logits_indices == std::vector<std::int32_t>{39, -1});  // request 2's chunk emits nothing
  CHECK(in.kv_indptr == std::vector<std::int32_t>{0, 3, 4});
  CHECK(in.kv_last_page_len == std::vector<std::int32_t>{8, 8});
  CHECK(in.positions[0] == 0);
  CHECK(in.positions[40] == 0);
  CHECK(in.input_ids[39] == 139);
  CHECK(in.input_ids[47] == 507);
  CHECK(in.block_table[5] == 0);  // request 2's row is padded with the null block
  check_against(b, s.kv(), in);
  // The next iteration: request 1 decodes its sampled token (which the KV manager has not heard of
  // yet: it takes decoded ids a block at a time), request 2 prefills the rest.
  s.complete({}, std::vector<decoded_token>{{request_id(1), 777}});
  const batch& b2 = s.schedule(1.0);
  const paged_attention_inputs in2 = make_paged_attention_inputs(b2, s.kv());
  REQUIRE(b2.entries.size() == 2);
  CHECK(in2.input_ids[0] == 777);
  CHECK(in2.positions[0] == 40);
  CHECK(in2.seq_lens == std::vector<std::int32_t>{41, 20});
  check_against(b2, s.kv(), in2);
  // A batch this KV manager does not hold is refused, naming the request.
  iteration_scheduler<> other(chunked_prefill(48, 4), fcfs_queue{}, weft_test::kv_of(64));
  CHECK_THROWS_WITH(make_paged_attention_inputs(b2, other.kv()), Catch::Contains("request 1"));
}

TEST_CASE("paged-attention inputs match the KV manager on every batch of a workload", "[sched][paged_attention]") {
  // Shared prefixes, recompute and swap preemption, forks and layered prefill: every batch's arrays
  // against the KV manager, computed the plain way.
  std::vector<std::vector<token_id>> prompts;
  for (std::uint64_t i = 0; i < 16; ++i) {
    auto p = ids_from(1, 30);  // a shared system prompt
    const auto tail = ids_from(static_cast<token_id>(1000 * (i + 1)), 3 + (i * 7) % 40);
    p.insert(p.end(), tail.begin(), tail.end());
    prompts.push_back(std::move(p));
  }
  const auto drive = [&](auto& s) {
    paged_attention_inputs in;
    std::size_t next = 0, batches = 0;
    std::map<request_id, int> left;
    std::uint64_t child = 100;
    for (int it = 0; it < 2000 && (next < prompts.size() || !s.idle()); ++it) {
      if (next < prompts.size()) {
        REQUIRE(s.submit(pa_request(next + 1, prompts[next]), it));
        left[request_id(next + 1)] = 12 + static_cast<int>((next * 5) % 30);
        ++next;
      }
      const batch& b = s.schedule(it);
      if (b.empty()) continue;
      build_paged_attention_inputs(b, s.kv(), in);
      check_against(b, s.kv(), in);
      ++batches;
      std::vector<decoded_token> d;
      std::vector<request_id> finished;
      for (const auto& e : b.entries) {
        if (!e.emits_token) continue;
        d.push_back({e.id, static_cast<token_id>(e.context_tokens)});
        if (--left[e.id] == 0) finished.push_back(e.id);
      }
      s.complete(finished, d);  // empties b
      if (it % 5 != 0) continue;
      for (const decoded_token& t : d)  // now and then a parallel sample of a request that goes on
        if (left[t.id] > 2 && t.id.value() < 100 && s.fork(t.id, request_id(child), 9)) {
          left[request_id(child++)] = 3;
          break;
        }
    }
    CHECK(s.idle());
    CHECK(batches > 20);
    return s.stats();
  };
  scheduler_options so = chunked_prefill(48, 12);  // room in the batch for forks; the KV cache is the limit
  so.preemption = preemption_mode::swap;
  iteration_scheduler<> sarathi(so, fcfs_queue{}, weft_test::kv_of(14, 8));
  const scheduler_stats a = drive(sarathi);
  CHECK(a.preempted_swap + a.preempted_recompute > 0);
  CHECK(a.forked > 0);
  layered_prefill_scheduler<> layered(layered_prefill(4, 2, 256, 6), fcfs_queue{}, weft_test::kv_of(14));
  const scheduler_stats l = drive(layered);
  CHECK(l.preempted_recompute > 0);
}
