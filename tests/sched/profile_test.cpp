#include <weft/sched/sim/cost_model.hpp>

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

using namespace weft::sched::sim;

namespace {

const std::string data = WEFT_DATA_DIR;
const std::string a100_7b = data + "/vidur/a100_Llama-2-7b-hf_mlp.csv";
const layer_shape llama2_7b_shape{32, 32, 4096, 11008};

// A small Vidur-format MLP profile: header plus rows of (tokens, tp, per-op ms).
std::string mlp_header() {
  std::string h;
  for (auto op : layer_op_names) h += "time_stats." + std::string(op) + ".median,";
  return h +
         "n_head,n_kv_head,n_embd,n_expanded_embd,vocab_size,use_gated_mlp,num_tokens,num_tensor_parallel_workers\n";
}
std::string mlp_row(int tokens, int tp, double ms = 0.1, const std::string& first = "") {
  std::string r = first.empty() ? std::to_string(ms) : first;
  for (std::size_t i = 1; i < layer_op_count; ++i) r += "," + std::to_string(ms);
  return r + ",32,32,4096,11008,32768,True," + std::to_string(tokens) + "," + std::to_string(tp) + "\n";
}

std::string layer_error(const std::string& text, layer_shape shape = llama2_7b_shape, int tp = 1,
                        profile_read_options o = {}) {
  std::istringstream in(text);
  try {
    (void)read_vidur_layer_profile(in, "prof.csv", shape, tp, o);
  } catch (const weft::error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("vidur layer profile: the shipped A100 Llama-2-7B profile", "[sched][profile]") {
  const layer_profile p = read_vidur_layer_profile(a100_7b, llama2_7b_shape, 1);
  CHECK(p.tensor_parallel() == 1);
  CHECK(p.tokens().size() == 259);  // 261 rows, 4096 and 2048 measured twice (averaged)
  CHECK(p.tokens().front() == 1);
  CHECK(p.tokens().back() == 4096);
  // Sum of the nine operators' medians at one token (ms): 0.005+0.065+0.005+0.025+0.005+0.116+0.007+0.06+0.002.
  CHECK(p.layer_s(1) == Approx(0.290e-3).epsilon(1e-9));
  CHECK(p.layer_s(0.5) == p.layer_s(1));  // floor below the smallest count
  // 4096 measured twice: 8.1705 and 8.0985... ms; the mean of the rows.
  CHECK(p.layer_s(4096) == Approx(8.17e-3).epsilon(0.01));
  CHECK(p.layer_s(8192) == Approx(2 * p.layer_s(4096)));  // compute-bound beyond the largest count
  // Linear between 16 and 24 when they differ little.
  CHECK(p.layer_s(20) == Approx((p.layer_s(16) + p.layer_s(24)) / 2));
  CHECK(p.op_s(layer_op::mlp_up_proj, 1) == Approx(0.116e-3));
  // Every other TP degree is there too.
  for (int tp : {2, 4, 8})
    CHECK(read_vidur_layer_profile(a100_7b, llama2_7b_shape, tp).layer_s(4096) < p.layer_s(4096));
}

TEST_CASE("layer profile: a GEMM tile step is placed at the power of two", "[sched][profile]") {
  layer_profile::op_table ops;
  for (auto& v : ops) v = {0.1, 0.1, 0.2};
  const layer_profile p("steps", llama2_7b_shape, 1, {504, 520, 1024}, ops);
  // 504 -> 520 doubles: a step, at 512 (most trailing zeros in [504, 520)).
  CHECK(p.layer_s(512) == Approx(0.9));
  CHECK(p.layer_s(513) == Approx(0.9));  // 520's value is 0.9 too here
  CHECK(p.layer_s(768) == Approx(0.9));  // 520 -> 1024 doubles: the step is at 768
  CHECK(p.layer_s(769) == Approx(1.8));
  CHECK(p.layer_s(1024) == Approx(1.8));
  layer_profile::op_table ops2;
  for (auto& v : ops2) v = {0.1, 0.2};
  const layer_profile q("steps2", llama2_7b_shape, 1, {504, 520}, ops2);
  CHECK(q.layer_s(512) == Approx(0.9));
  CHECK(q.layer_s(513) == Approx(1.8));
  // Small differences are linear.
  layer_profile::op_table ops3;
  for (auto& v : ops3) v = {0.10, 0.11};
  const layer_profile r("lin", llama2_7b_shape, 1, {100, 200}, ops3);
  CHECK(r.layer_s(150) == Approx(9 * 0.105));
  // subset keeps the chosen points.
  const std::size_t keep[] = {0, 2};
  CHECK(p.subset(keep).tokens().size() == 2);
  CHECK_THROWS_AS(layer_profile("bad", llama2_7b_shape, 1, {5, 5}, ops2), weft::error);
  layer_profile::op_table neg = ops2;
  neg[3][1] = -1.0;
  CHECK_THROWS_AS(layer_profile("bad", llama2_7b_shape, 1, {5, 6}, neg), weft::error);
}

TEST_CASE("layer profile: rescaling to a GQA shape scales each operator by its work", "[sched][profile]") {
  const layer_profile p = read_vidur_layer_profile(a100_7b, llama2_7b_shape, 1);
  const layer_shape mistral = mistral_7b().shape();
  const layer_profile m = p.rescaled(mistral);
  CHECK(m.shape() == mistral);
  CHECK(m.op_s(layer_op::attn_pre_proj, 512) == Approx(p.op_s(layer_op::attn_pre_proj, 512) * 0.5));  // (32+16)/(32+64)
  CHECK(m.op_s(layer_op::mlp_up_proj, 512) == Approx(p.op_s(layer_op::mlp_up_proj, 512) * 14336.0 / 11008));
  CHECK(m.op_s(layer_op::input_layernorm, 512) == Approx(p.op_s(layer_op::input_layernorm, 512)));
  // Through the reader.
  profile_read_options o;
  o.rescale_to_shape = true;
  std::ifstream in(a100_7b);
  const layer_profile r = read_vidur_layer_profile(in, a100_7b, mistral, 1, o);
  CHECK(r.layer_s(777) == Approx(m.layer_s(777)));
}

TEST_CASE("vidur layer profile: bad files name file, line and column; nothing is half-loaded",
          "[sched][profile][errors]") {
  const std::string head = mlp_header();
  CHECK_THAT(layer_error(head + mlp_row(8, 1) + mlp_row(4, 1) + mlp_row(16, 1)),
             Catch::Contains("prof.csv:4:16") && Catch::Contains("monotonic"));
  CHECK(layer_error(head + mlp_row(8, 1) + mlp_row(8, 1) + mlp_row(4, 1) + mlp_row(8, 2) + mlp_row(16, 2)) ==
        "no error");  // descending with a repeat, and another TP ascending: both fine
  CHECK_THAT(layer_error(head + mlp_row(8, 1) + mlp_row(4, 1, 0.1, "-0.5")),
             Catch::Contains("prof.csv:3:1") && Catch::Contains("negative"));
  CHECK_THAT(layer_error(head + mlp_row(8, 1, 0.1, "nan")), Catch::Contains("prof.csv:2:1"));
  CHECK_THAT(layer_error(head + mlp_row(8, 1, 0.1, "inf")), Catch::Contains("prof.csv:2:1"));
  CHECK_THAT(layer_error(head + mlp_row(0, 1)), Catch::Contains("prof.csv:2:16") && Catch::Contains(">= 1"));
  CHECK_THAT(layer_error(head + mlp_row(8, 1) + "0.1,0.1\n"), Catch::Contains("prof.csv:3"));
  // A missing column: named, with the line of the header.
  std::string no_add = head;
  no_add.replace(no_add.find("time_stats.add.median"), 21, "time_stats.addx.median");
  CHECK_THAT(layer_error(no_add + mlp_row(8, 1)),
             Catch::Contains("prof.csv:1") && Catch::Contains("time_stats.add.median"));
  CHECK_THAT(layer_error(head + mlp_row(8, 1), llama2_7b_shape, 1, {"p99", false}), Catch::Contains("statistic"));
  // A model or TP the file lacks.
  CHECK_THAT(layer_error(head + mlp_row(8, 1), mistral_7b().shape()),
             Catch::Contains("prof.csv") && Catch::Contains("n_kv_head 8") && Catch::Contains("n_kv_head 32"));
  CHECK_THAT(layer_error(head + mlp_row(8, 1), llama2_7b_shape, 2), Catch::Contains("at TP 1"));
  CHECK_THROWS_AS(read_vidur_layer_profile(data + "/vidur/none.csv", llama2_7b_shape, 1), weft::error);
}

TEST_CASE("vidur all-reduce profile: isotonic, interpolated, errors", "[sched][profile]") {
  const all_reduce_profile a = read_vidur_all_reduce_profile(data + "/vidur/a100_pairwise_nvlink_all_reduce.csv", 4);
  CHECK(a.workers() == 4);
  for (std::size_t i = 1; i < a.elements().size(); ++i) CHECK(a.fitted_s(i) >= a.fitted_s(i - 1));
  CHECK(a.seconds_for(16777216) == Approx(1.115e-3).epsilon(0.02));
  CHECK(a.seconds_for(1) == a.fitted_s(0));
  const std::string head = "time_stats.all_reduce.median,rank,num_workers,size,collective,devices_per_node\n";
  auto error = [&](const std::string& rows, int workers = 2) {
    std::istringstream in(head + rows);
    try {
      (void)read_vidur_all_reduce_profile(in, "ar.csv", workers);
    } catch (const weft::error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error("0.1,0,2,2048,all_reduce,2\n0.3,0,2,4096,all_reduce,2\n0.2,0,2,8192,all_reduce,2\n") == "no error");
  CHECK_THAT(error("0.1,0,2,4096,all_reduce,2\n0.3,0,2,2048,all_reduce,2\n0.2,0,2,8192,all_reduce,2\n"),
             Catch::Contains("ar.csv:4:4") && Catch::Contains("monotonic"));
  CHECK_THAT(error("-0.1,0,2,2048,all_reduce,2\n"), Catch::Contains("ar.csv:2:1"));
  CHECK_THAT(error("0.1,0,2,2048,all_reduce,2\n", 8),
             Catch::Contains("num_workers 8") && Catch::Contains("num_workers 2"));
  CHECK_THAT(error("0.1,0,2,2048,all_gather,2\n"), Catch::Contains("none"));  // other collectives skipped
  std::istringstream three(head + "0.1,0,2,2048,all_reduce,2\n0.3,0,2,4096,all_reduce,2\n0.2,0,2,8192,all_reduce,2\n");
  const auto iso = read_vidur_all_reduce_profile(three, "ar.csv", 2);
  CHECK(iso.fitted_s(1) == Approx(0.25e-3));  // 0.3 and 0.2 pooled
  CHECK(iso.fitted_s(2) == Approx(0.25e-3));
}

TEST_CASE("load_vidur_profile finds a deployment's files or lists what the folder has", "[sched][profile]") {
  const measured_profile p = load_vidur_profile(data + "/vidur", "a100", "Llama-2-70b-hf", llama2_70b().shape(), 4);
  REQUIRE(p.all_reduce);
  CHECK(p.all_reduce->workers() == 4);
  try {
    (void)load_vidur_profile(data + "/vidur", "a40", "Llama-2-7b-hf", llama2_7b_shape, 1);
    FAIL("no error");
  } catch (const weft::error& e) {
    CHECK(e.code() == weft::errc::not_found);
    CHECK_THAT(e.what(), Catch::Contains("a40_Llama-2-7b-hf_mlp.csv") && Catch::Contains("h100_Llama-2-70b-hf"));
  }
  CHECK_THROWS_AS(load_vidur_profile(data + "/vidur", "a100", "Llama-2-7b-hf", llama2_7b_shape, 8), weft::error);
}

TEST_CASE("cost model: the profile replaces the roofline for linear operators only", "[sched][profile][cost]") {
  cost_params p = llama2_7b_a100();
  const cost_model roof(p);
  const cost_model prof(p, load_vidur_profile(data + "/vidur", "a100", "Llama-2-7b-hf", p.model.shape(), 1));
  REQUIRE(prof.profile() != nullptr);
  CHECK(prof.linear_layer_s(4096) == Approx(8.17e-3).epsilon(0.01));
  CHECK(roof.linear_layer_s(4096) == Approx(roof.roofline_linear_layer_s(4096)));
  CHECK(prof.attention_layer_s(1e6, 5000) == roof.attention_layer_s(1e6, 5000));
  const iteration_shape decode{64, 64 * 1000.0, 64 * 1000.0, 64};
  CHECK(prof.iteration_s(decode) ==
        Approx(p.iteration_overhead_s + 64 * p.per_request_overhead_s +
               32 * (prof.linear_layer_s(64) + prof.attention_layer_s(64000, 64000)) + prof.head_s(64)));
  // Mismatches are refused.
  cost_params tp2 = p;
  tp2.tensor_parallel = 2;
  CHECK_THROWS_AS(cost_model(tp2, load_vidur_profile(data + "/vidur", "a100", "Llama-2-7b-hf", p.model.shape(), 1)),
                  weft::error);
  cost_params mistral = mistral_7b_a100();
  CHECK_THROWS_AS(cost_model(mistral, load_vidur_profile(data + "/vidur", "a100", "Llama-2-7b-hf", p.model.shape(), 1)),
                  weft::error);
  profile_read_options o;
  o.rescale_to_shape = true;
  const cost_model m(mistral,
                     load_vidur_profile(data + "/vidur", "a100", "Llama-2-7b-hf", mistral.model.shape(), 1, o));
  CHECK(m.linear_layer_s(512) < prof.linear_layer_s(512) * 1.2);
  // TP 4 with the measured all-reduce.
  cost_params p70 = llama2_70b_a100_tp4();
  const cost_model m70(p70, load_vidur_profile(data + "/vidur", "a100", "Llama-2-70b-hf", p70.model.shape(), 4));
  CHECK(m70.tp_layer_s(4096) == Approx(2 * m70.profile()->all_reduce->seconds_for(4096.0 * 8192)));
}
