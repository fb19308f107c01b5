// libFuzzer harness: sched::sim::read_length_pairs_csv, then a Poisson workload from what it read.
// Findings as in azure_trace_fuzz.cpp.
#include "trace_fuzz_common.hpp"

#include <weft/sched/sim/workload.hpp>

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  try {
    const auto pairs = weft::sched::sim::read_length_pairs_csv(in, "fuzz");
    for (const auto& p : pairs)
      if (p.prompt_tokens < 1 || p.prompt_tokens > weft::sched::sim::max_request_tokens || p.output_tokens < 1 ||
          p.output_tokens > weft::sched::sim::max_request_tokens)
        std::abort();
    if (!pairs.empty() && pairs.size() <= 4096) {
      weft::sched::sim::pairs_options o;
      o.rate_per_s = 3.0;
      o.max_total_tokens = 8192;
      check_workload(weft::sched::sim::pairs_workload(pairs, o));
    }
  } catch (const weft::error&) {
  }
  return 0;
}
