#include <weft/moe/trace.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace weft::moe;

TEST_CASE("CSV round trip", "[moe][trace]") {
  trace_params p;
  p.shape = {3, 10, 2};
  p.num_requests = 3;
  p.tokens_per_request = 5;
  const routing_trace t = generate_trace(p);
  std::stringstream buffer;
  write_csv(buffer, t);
  const std::string text = buffer.str();
  CHECK(text.rfind("# weft-moe-trace v1 layers=3 experts=10 top_k=2\ntoken,request,layer,experts\n0,0,0,", 0) == 0);
  const routing_trace back = read_csv(buffer);
  REQUIRE(back.num_tokens() == t.num_tokens());
  CHECK(back.shape() == t.shape());
  for (std::size_t i = 0; i < t.num_tokens(); ++i) {
    CHECK(back.request(i) == t.request(i));
    for (std::uint32_t l = 0; l < 3; ++l)
      CHECK(std::vector<std::uint32_t>(back.experts(i, l).begin(), back.experts(i, l).end()) ==
            std::vector<std::uint32_t>(t.experts(i, l).begin(), t.experts(i, l).end()));
  }
  CHECK(back.lookups() == t.lookups());
}

TEST_CASE("the CSV reader names the broken line", "[moe][trace][errors]") {
  const std::string head = "# weft-moe-trace v1 layers=2 experts=4 top_k=2\ntoken,request,layer,experts\n";
  auto parse = [](const std::string& s) {
    std::istringstream in(s);
    return read_csv(in);
  };
  CHECK(parse(head + "0,7,0,1 2\n0,7,1,3 0\n").num_tokens() == 1);
  CHECK(parse(head + "0,7,0,1 2\n# comment\n\n0,7,1,3 0\n").num_tokens() == 1);
  CHECK_THROWS_WITH(parse(""), Catch::Contains("line 1 is empty"));
  CHECK_THROWS_WITH(parse("# other v1\n"), Catch::Contains("line 1"));
  CHECK_THROWS_WITH(parse("# weft-moe-trace v1 layers=2 experts=4\ntoken,request,layer,experts\n"),
                    Catch::Contains("must give layers, experts and top_k"));
  CHECK_THROWS_WITH(parse("# weft-moe-trace v1 layers=2 experts=4 top_k=5\ntoken,request,layer,experts\n"),
                    Catch::Contains("top_k is 5"));
  CHECK_THROWS_WITH(parse(head + "0,7,0,1 9\n"), Catch::Contains("moe trace:3:4: column 'experts': unknown expert 9"));
  CHECK_THROWS_WITH(parse(head + "0,7,0,1\n"), Catch::Contains("moe trace:3:4: column 'experts': lists 1 experts"));
  CHECK_THROWS_WITH(parse(head + "0,7,1,1 2\n"), Catch::Contains("expected token 0 layer 0"));
  CHECK_THROWS_WITH(parse(head + "0,7,0,1 2\n0,8,1,1 2\n"), Catch::Contains("moe trace:4: request 8"));
  CHECK_THROWS_WITH(parse(head + "0,7,0,1 1\n0,7,1,3 0\n"), Catch::Contains("twice"));
  CHECK_THROWS_WITH(parse(head + "0,7,0,1 x\n"), Catch::Contains("'x' is not a non-negative integer"));
  CHECK_THROWS_WITH(parse(head + "0,7,0\n"), Catch::Contains("3 columns"));
  CHECK_THROWS_WITH(parse(head + "x,7,0,1 2\n"),
                    Catch::Contains("moe trace:3:1: column 'token': 'x' is not a whole number"));
  CHECK_THROWS_WITH(parse(head + "0,7,0,1 2\n"), Catch::Contains("ends inside token 0"));
  try {
    (void)parse(head + "0,7,0,1 9\n");
  } catch (const weft::error& e) {
    CHECK(e.code() == weft::errc::parse);
  }
}

TEST_CASE("the CSV reader takes CRLF files and bounds hostile headers and rows", "[moe][trace][errors]") {
  auto parse = [](const std::string& s) {
    std::istringstream in(s);
    return read_csv(in);
  };
  // CRLF (a trace saved on Windows) reads like LF.
  CHECK(parse("# weft-moe-trace v1 layers=2 experts=4 top_k=2\r\ntoken,request,layer,experts\r\n0,7,0,1 2\r\n0,7,1,3 "
              "0\r\n")
            .num_tokens() == 1);
  // A header that would make an expert_cache allocate 2^64 entries is refused before anything is allocated.
  CHECK_THROWS_WITH(parse("# weft-moe-trace v1 layers=4294967295 experts=4294967295 top_k=2\n"),
                    Catch::Contains("layers 4294967295 exceeds the limit 1024"));
  CHECK_THROWS_WITH(parse("# weft-moe-trace v1 layers=1024 experts=65536 top_k=2\n"),
                    Catch::Contains("layers * experts 67108864 exceeds the limit 4194304"));
  CHECK_THROWS_WITH(parse("# weft-moe-trace v1 layers=1 experts=65536 top_k=100000\n"),
                    Catch::Contains("top_k 100000 exceeds the limit 1024"));
  CHECK_THROWS_WITH(parse("# weft-moe-trace v1 layers=99999999999999999999 experts=4 top_k=2\n"),
                    Catch::Contains("is not a non-negative integer"));
  // 19 digits above INT64_MAX (found by moe.fuzz_trace: it overflowed while parsing).
  CHECK_THROWS_WITH(parse("# weft-moe-trace v1 layers=1 experts=9555555555555555555 top_k=2\n"),
                    Catch::Contains("is not a non-negative integer"));
  // A row of 10 MB is refused by length, with a short message.
  const std::string head = "# weft-moe-trace v1 layers=1 experts=8 top_k=2\ntoken,request,layer,experts\n";
  try {
    (void)parse(head + "0,0,0," + std::string(10'000'000, '1') + "\n");
    FAIL("must throw");
  } catch (const weft::error& e) {
    CHECK(std::string(e.what()).size() < 200);
    CHECK(std::string(e.what()).find("record longer than") != std::string::npos);
  }
  // The largest allowed top_k reads in linear time: 1024 distinct experts per row.
  std::string big = "# weft-moe-trace v1 layers=1 experts=65536 top_k=1024\ntoken,request,layer,experts\n";
  for (int t = 0; t < 50; ++t) {
    big += std::to_string(t) + ",0,0,";
    for (int e = 0; e < 1024; ++e) big += std::to_string(e * 7 + t) + (e + 1 < 1024 ? " " : "\n");
  }
  CHECK(parse(big).num_tokens() == 50);
}

TEST_CASE("routing_trace::append validates tokens", "[moe][trace][errors]") {
  routing_trace t({2, 4, 2});
  const std::vector<std::uint32_t> ok{0, 1, 2, 3};
  t.append(0, ok);
  CHECK_THROWS_AS(t.append(0, std::vector<std::uint32_t>{0, 1, 2}), weft::error);
  CHECK_THROWS_AS(t.append(0, std::vector<std::uint32_t>{0, 4, 2, 3}), weft::error);
  CHECK_THROWS_AS(t.append(0, std::vector<std::uint32_t>{0, 0, 2, 3}), weft::error);
  CHECK(t.num_tokens() == 1);
}

TEST_CASE("the generator is deterministic and has the promised statistics", "[moe][trace][generator]") {
  trace_params p;  // benchmark defaults: 16 layers, 64 experts, top-2
  const routing_trace a = generate_trace(p), b = generate_trace(p);
  CHECK(a.lookups() == b.lookups());
  trace_params q = p;
  q.seed = 2;
  CHECK(generate_trace(q).lookups() != a.lookups());
  CHECK(a.num_tokens() == std::size_t{p.num_requests} * p.tokens_per_request);

  // Temporal reuse: consecutive tokens of a request share experts far more often than chance.
  std::size_t same = 0, pairs = 0;
  for (std::size_t t = 1; t < a.num_tokens(); ++t) {
    if (a.request(t) != a.request(t - 1)) continue;
    for (std::uint32_t l = 0; l < p.shape.num_layers; ++l) {
      ++pairs;
      same += a.experts(t, l)[0] == a.experts(t - 1, l)[0];
    }
  }
  CHECK(static_cast<double>(same) / pairs > p.reuse * 0.8);
  // Popularity is skewed: the most used expert of layer 0 is far above the uniform share.
  std::map<std::uint32_t, std::size_t> count;
  for (std::size_t t = 0; t < a.num_tokens(); ++t)
    for (std::uint32_t e : a.experts(t, 0)) ++count[e];
  std::size_t top = 0;
  for (auto& [e, c] : count) top = std::max(top, c);
  const double uniform = 2.0 * a.num_tokens() / 64;
  CHECK(top > 3 * uniform);
  // Without reuse or correlation and zero skew, the same properties vanish.
  trace_params flat = p;
  flat.reuse = 0;
  flat.layer_correlation = 0;
  flat.zipf_s = 0;
  const routing_trace f = generate_trace(flat);
  same = pairs = 0;
  for (std::size_t t = 1; t < f.num_tokens(); ++t) {
    if (f.request(t) != f.request(t - 1)) continue;
    for (std::uint32_t l = 0; l < p.shape.num_layers; ++l)
      ++pairs, same += f.experts(t, l)[0] == f.experts(t - 1, l)[0];
  }
  CHECK(static_cast<double>(same) / pairs < 0.05);

  trace_params bad = p;
  bad.reuse = 0.8;
  bad.layer_correlation = 0.5;
  CHECK_THROWS_AS(generate_trace(bad), weft::error);
  bad = p;
  bad.num_topics = 0;
  CHECK_THROWS_AS(generate_trace(bad), weft::error);
  bad = p;
  bad.shape.top_k = 65;
  CHECK_THROWS_AS(generate_trace(bad), weft::error);
  // Extreme skew with top_k == num_experts still terminates and stays valid.
  trace_params extreme;
  extreme.shape = {2, 4, 4};
  extreme.zipf_s = 20;
  extreme.num_requests = 2;
  extreme.tokens_per_request = 4;
  CHECK(generate_trace(extreme).num_tokens() == 8);
}

TEST_CASE("per-layer reuse and the measured repetition between consecutive tokens", "[moe][trace][generator]") {
  // A hand-made trace: two requests; the pair crossing them is skipped.
  routing_trace t({2, 4, 2});
  const std::vector<std::uint32_t> a{0, 1, 2, 3}, b{0, 2, 1, 0}, c{3, 1, 2, 3};
  t.append(7, a);
  t.append(7, b);  // layer 0: same first (0); layer 1: {2,3} then {1,0}, nothing shared
  t.append(8, c);  // another request: not compared with b
  t.append(8, a);  // layer 0: first 3 vs 0 differs, {3,1} vs {0,1} share 1; layer 1: {2,3} vs {2,3} same
  const auto rep = consecutive_repetition(t);
  REQUIRE(rep.size() == 2);
  CHECK(rep[0].first_choice == Approx(0.5));
  CHECK(rep[0].any_choice == Approx(1.0));
  CHECK(rep[1].first_choice == Approx(0.5));
  CHECK(rep[1].any_choice == Approx(0.5));
  CHECK(consecutive_repetition(routing_trace({3, 4, 1}))[2].first_choice == 0.0);  // no pairs

  // Bad per-layer reuse is refused.
  trace_params bad;
  bad.layer_reuse = {0.1, 0.2};  // 16 layers
  CHECK_THROWS_AS(generate_trace(bad), weft::error);
  bad.layer_reuse.assign(16, 0.1);
  bad.layer_reuse[3] = -0.1;
  CHECK_THROWS_AS(generate_trace(bad), weft::error);
  bad.layer_reuse[3] = 0.9;  // + layer_correlation 0.35 > 1
  CHECK_THROWS_AS(generate_trace(bad), weft::error);

  // Empty layer_reuse is the old generator, bit for bit; equal per-layer values give the same trace.
  trace_params p;
  p.num_requests = 4;
  const routing_trace before = generate_trace(p);
  p.layer_reuse.assign(p.shape.num_layers, p.reuse);
  const routing_trace same = generate_trace(p);
  REQUIRE(same.num_tokens() == before.num_tokens());
  for (std::size_t k = 0; k < before.num_tokens(); ++k)
    for (std::uint32_t l = 0; l < p.shape.num_layers; ++l)
      CHECK(std::equal(same.experts(k, l).begin(), same.experts(k, l).end(), before.experts(k, l).begin()));

  // The Mixtral preset reproduces the published first-choice repetition at layers 0, 15, 31 (Jiang et
  // al. 2024, Table 5) within 1.5 points on a long trace, and is near the "first or second" one.
  const routing_trace mix = generate_trace(mixtral_trace_params(64, 256, 3));
  const auto m = consecutive_repetition(mix);
  const std::array<std::uint32_t, 3> at{0, 15, 31};
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(std::abs(m[at[i]].first_choice - mixtral_first_choice_repetition[i]) < 0.015);
    CHECK(std::abs(m[at[i]].any_choice - mixtral_any_choice_repetition[i]) < 0.08);
  }
  CHECK(m[15].first_choice > m[0].first_choice + 0.08);  // middle layers repeat far more than the first
}
