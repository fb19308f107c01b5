// libFuzzer harness: sched::sim::read_burstgpt_csv over arbitrary bytes, at time scales 1 and 10
// (1e308 x 10 must be an error, not an infinite arrival). Findings as in azure_trace_fuzz.cpp.
#include "trace_fuzz_common.hpp"

#include <weft/sched/sim/trace_readers.hpp>

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (double scale : {1.0, 10.0}) {
    std::istringstream in(text);
    weft::sched::sim::trace_options o;
    o.time_scale = scale;
    o.max_rows = 2000;
    std::size_t skipped = 0;
    try {
      check_workload(weft::sched::sim::read_burstgpt_csv(in, o, &skipped, "fuzz"));
    } catch (const weft::error&) {
    }
  }
  return 0;
}
