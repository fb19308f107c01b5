#include <weft/sched/sim/workload.hpp>

#include <catch2/catch.hpp>

#include <filesystem>
#include <limits>
#include <sstream>
#include <string>

using namespace weft::sched;
using namespace weft::sched::sim;

namespace {

template <class Read>
std::string error_of(Read&& read) {
  try {
    read();
  } catch (const weft::error& e) {
    CHECK(e.code() == weft::errc::parse);
    return e.what();
  }
  return "no error";
}

std::string azure_error(const std::string& text, trace_options o = {}) {
  return error_of([&] {
    std::istringstream in(text);
    (void)read_azure_csv(in, o, "trace.csv");
  });
}

std::string burst_error(const std::string& text, trace_options o = {}) {
  return error_of([&] {
    std::istringstream in(text);
    (void)read_burstgpt_csv(in, o, nullptr, "burst.csv");
  });
}

const std::string azure_head = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374,44\n";
const std::string burst_head = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n";

}  // namespace

TEST_CASE("azure reader: rows, precision and columns by name", "[sched][trace]") {
  std::istringstream good(
      "TIMESTAMP,ContextTokens,GeneratedTokens\n"
      "2023-11-16 18:15:46.6805900,374,44\n"
      "2023-11-16 18:15:50.9951690,396,109\r\n"
      "2023-11-16 18:15:51.2224670,879,55\n");
  const workload w = read_azure_csv(good);
  REQUIRE(w.size() == 3);
  CHECK(w[0].req.arrival_s == 0.0);
  CHECK(w[1].req.arrival_s == Approx(4.314579).margin(1e-9));
  CHECK(w[2].req.prompt_tokens == 879);
  CHECK(w[2].output_tokens == 55);
  // Column order does not matter; extra columns are ignored (the 2024 traces add none, others may).
  std::istringstream shuffled("GeneratedTokens,x,ContextTokens,TIMESTAMP\n7,a,5,2024-02-29 00:00:00\n");
  const workload v = read_azure_csv(shuffled);
  REQUIRE(v.size() == 1);
  CHECK(v[0].req.prompt_tokens == 5);
  CHECK(v[0].output_tokens == 7);
}

TEST_CASE("azure reader: every bad row names file, line and column", "[sched][trace][errors]") {
  CHECK_THAT(azure_error(azure_head + "2023-11-16 18:15:47.1,-5,44\n"),
             Catch::Contains("trace.csv:3:2") && Catch::Contains("ContextTokens") && Catch::Contains("below"));
  CHECK_THAT(azure_error(azure_head + "2023-11-16 18:15:47.1,12\n"),
             Catch::Contains("trace.csv:3:3") && Catch::Contains("GeneratedTokens"));
  CHECK_THAT(azure_error(azure_head + "\n2023-11-16 18:15:47.1,abc,4\n"), Catch::Contains("trace.csv:4:2"));
  CHECK_THAT(azure_error(azure_head + "yesterday,1,4\n"),
             Catch::Contains("trace.csv:3:1") && Catch::Contains("TIMESTAMP"));
  CHECK_THAT(azure_error(azure_head + "2023-11-16 18:15:47.1,10,0\n"), Catch::Contains("trace.csv:3:3"));
  CHECK_THAT(azure_error("time,in,out\n"), Catch::Contains("trace.csv:1") && Catch::Contains("TIMESTAMP"));
  CHECK_THAT(azure_error(azure_head + "2023-11-16 18:15:40.1,10,3\n"), Catch::Contains("earlier than the first"));
  CHECK_THROWS_AS(read_azure_csv(std::string("/nonexistent/trace.csv")), weft::error);
}

TEST_CASE("azure reader: impossible dates and times are refused", "[sched][trace][errors]") {
  for (const char* t : {"2023-02-31 10:00:00", "2023-02-29 10:00:00", "2023-04-31 00:00:00", "2023-13-01 00:00:00",
                        "2023-00-10 00:00:00", "2023-11-00 00:00:00", "2023-11-16 24:00:00", "2023-11-16 12:60:00",
                        "2023-11-16 12:00:61", "0000-01-01 00:00:00", "2023-11-16 12:00:00.",
                        "2023-11-16 12:00:00.1234567890", "2023-11-16 12:00:00x1", "2023-11-16"}) {
    CAPTURE(t);
    CHECK_THAT(azure_error(azure_head + t + ",10,3\n"), Catch::Contains("trace.csv:3:1"));
  }
  // Leap years and leap seconds are real.
  std::istringstream leap(
      "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-02-29 23:59:60.5,1,1\n2024-03-01 00:00:01.5,1,1\n2000-02-29 "
      "00:00:00,1,1\n");
  CHECK_THAT(error_of([&] { (void)read_azure_csv(leap); }), Catch::Contains("earlier than the first"));
  std::istringstream ok(
      "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-02-29 23:59:60.5,1,1\n2024-03-01 00:00:01.5,1,1\n");
  const workload w = read_azure_csv(ok);
  CHECK(w[1].req.arrival_s == Approx(1.0));
}

TEST_CASE("azure reader: lengths are bounded by max_request_tokens", "[sched][trace][errors]") {
  CHECK_THAT(azure_error(azure_head + "2023-11-16 18:15:47.1,9223372036854775807,3\n"),
             Catch::Contains("trace.csv:3:2") && Catch::Contains("max_request_tokens"));
  CHECK_THAT(azure_error(azure_head + "2023-11-16 18:15:47.1,99999999999999999999999,3\n"),
             Catch::Contains("trace.csv:3:2") && Catch::Contains("out of range"));
  CHECK_THAT(azure_error(azure_head + "2023-11-16 18:15:47.1,5," + std::to_string(max_request_tokens + 1) + "\n"),
             Catch::Contains("trace.csv:3:3"));
  std::istringstream at_limit(azure_head + "2023-11-16 18:15:47.1," + std::to_string(max_request_tokens) + ",1\n");
  CHECK(read_azure_csv(at_limit).back().req.prompt_tokens == max_request_tokens);
}

TEST_CASE("azure reader: a time scale that overflows arrivals is an error, not Inf", "[sched][trace][errors]") {
  trace_options o;
  o.time_scale = 1e300;
  CHECK_THAT(azure_error(azure_head + "2023-11-16 18:15:47.1,5,3\n", o),
             Catch::Contains("trace.csv:3:1") && Catch::Contains("max_arrival_s"));
  o.time_scale = std::numeric_limits<double>::infinity();
  std::istringstream in(azure_head);
  CHECK_THROWS_AS(read_azure_csv(in, o), weft::error);  // options are checked first
}

TEST_CASE("burstgpt reader: models become clients, failed rows skipped", "[sched][trace]") {
  std::istringstream in(burst_head +
                        "5,ChatGPT,472,18,490,Conversation log\n"
                        "45,ChatGPT,1087,0,1087,Conversation log\n"
                        "118,GPT-4,417,30,447,Conversation log\n");
  std::size_t skipped = 0;
  const workload w = read_burstgpt_csv(in, {}, &skipped);
  REQUIRE(w.size() == 2);
  CHECK(skipped == 1);
  CHECK(w[0].req.client == client_id(0));
  CHECK(w[1].req.client == client_id(1));
  CHECK(w[1].req.arrival_s == Approx(113.0));
}

TEST_CASE("burstgpt reader: bad rows, huge timestamps and lengths are errors", "[sched][trace][errors]") {
  CHECK_THAT(burst_error(burst_head + "5,ChatGPT,47x,18,490,Conversation log\n"),
             Catch::Contains("burst.csv:2:3") && Catch::Contains("Request tokens"));
  trace_options o;
  o.time_scale = 10.0;  // 1e308 * 10 = Inf: rejected, not replayed as an infinite arrival
  CHECK_THAT(burst_error(burst_head + "1e308,ChatGPT,4,18,22,Conversation log\n", o),
             Catch::Contains("burst.csv:2:1") && Catch::Contains("max_arrival_s"));
  CHECK_THAT(burst_error(burst_head + "1e300,ChatGPT,4,18,22,Conversation log\n"), Catch::Contains("burst.csv:2:1"));
  CHECK_THAT(burst_error(burst_head + "nan,ChatGPT,4,18,22,Conversation log\n"), Catch::Contains("burst.csv:2:1"));
  CHECK_THAT(burst_error(burst_head + "inf,ChatGPT,4,18,22,Conversation log\n"), Catch::Contains("burst.csv:2:1"));
  CHECK_THAT(burst_error(burst_head + "-1,ChatGPT,4,18,22,Conversation log\n"), Catch::Contains("negative"));
  CHECK_THAT(burst_error(burst_head + "1,ChatGPT,9223372036854775807,18,22,Conversation log\n"),
             Catch::Contains("burst.csv:2:3") && Catch::Contains("max_request_tokens"));
  CHECK_THAT(burst_error("Timestamp,Model,Request tokens\n"), Catch::Contains("Response tokens"));
}

TEST_CASE("length pairs: Sarathi's file format, cut to a maximum, Poisson or trace arrivals", "[sched][trace][pairs]") {
  std::istringstream in(
      "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n74,918,992,0.08\n290,905,1195,0.32\n"
      "8000,400,8400,20\n");
  const auto pairs = read_length_pairs_csv(in, "lengths.csv");
  REQUIRE(pairs.size() == 3);
  CHECK(pairs[2].prompt_tokens == 8000);
  std::istringstream bad("prompt_tokens,output_tokens\n5,0\n");
  CHECK_THAT(error_of([&] { (void)read_length_pairs_csv(bad, "l.csv"); }), Catch::Contains("l.csv:2:2"));
  std::istringstream none("a,b\n1,2\n");
  CHECK_THAT(error_of([&] { (void)read_length_pairs_csv(none, "l.csv"); }), Catch::Contains("prompt_tokens"));

  pairs_options o;
  o.seed = 3;
  o.requests = 2000;
  o.rate_per_s = 4.0;
  o.max_total_tokens = 8192;
  const workload w = pairs_workload(pairs, o);
  REQUIRE(w.size() == 2000);
  CHECK(w.back().req.arrival_s / 2000.0 == Approx(0.25).epsilon(0.08));
  for (const auto& r : w) CHECK(r.req.prompt_tokens + r.output_tokens <= 8192);
  // 8400 - 8192 = 208 over: prompt -= ceil(208 * 8000/8400) = 199, output -= ceil(208 * 400/8400) = 10.
  bool saw_cut = false;
  for (const auto& r : w) saw_cut |= r.req.prompt_tokens == 7801 && r.output_tokens == 390;
  CHECK(saw_cut);
  // Common random numbers: twice the rate, same requests at half the times.
  pairs_options fast = o;
  fast.rate_per_s = 8.0;
  const workload f = pairs_workload(pairs, fast);
  for (std::size_t i = 0; i < w.size(); i += 97) {
    CHECK(f[i].req.arrival_s == Approx(w[i].req.arrival_s / 2));
    CHECK(f[i].req.prompt_tokens == w[i].req.prompt_tokens);
  }
  // Trace arrivals.
  const std::vector<double> at = {0.0, 0.5, 0.5, 2.0};
  const workload t = pairs_workload(pairs, at, o);
  REQUIRE(t.size() == 4);
  CHECK(t[3].req.arrival_s == 2.0);
  CHECK_THROWS_AS(pairs_workload(pairs, std::vector<double>{1.0, 0.5}, o), weft::error);
  pairs_options bad_rate = o;
  bad_rate.rate_per_s = 0.0;
  CHECK_THROWS_AS(pairs_workload(pairs, bad_rate), weft::error);
  CHECK_THROWS_AS(pairs_workload(std::vector<length_pair>{}, o), weft::error);
  CHECK_THROWS_AS(pairs_workload(std::vector<length_pair>{{0, 3}}, o), weft::error);
}

TEST_CASE("generators clamp lengths to max_request_tokens and reject bigger maxima", "[sched][trace][generators]") {
  generator_options g;
  g.requests = 50;
  g.prompt = {1e30, 1.0, 1, max_request_tokens};
  const workload w = poisson_workload(g);
  for (const auto& r : w) CHECK(r.req.prompt_tokens <= max_request_tokens);
  g.prompt.max = max_request_tokens + 1;
  CHECK_THROWS_AS(poisson_workload(g), weft::error);
}
