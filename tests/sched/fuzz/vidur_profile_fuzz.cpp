// libFuzzer harness: the Vidur profile readers (layer operators and all-reduce) over arbitrary bytes,
// then every read profile queried across token counts. A weft::error is the expected outcome for a
// malformed file; a crash, a sanitizer report, another exception type or a negative or non-finite
// prediction is a finding.
#include <weft/sched/sim/vidur_profile.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace weft::sched::sim;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto sane = [](double s) {
    if (!std::isfinite(s) || s < 0.0) std::abort();
  };
  for (int tp : {1, 2}) {
    for (bool rescale : {false, true}) {
      std::istringstream in(text);
      try {
        profile_read_options o;
        o.rescale_to_shape = rescale;
        const layer_profile p = read_vidur_layer_profile(in, "fuzz", {32, 8, 4096, 14336}, tp, o);
        for (double t : {0.0, 1.0, 7.5, 100.0, 513.0, 4096.0, 1e6}) sane(p.layer_s(t));
      } catch (const weft::error&) {
      }
    }
    std::istringstream in(text);
    try {
      const all_reduce_profile a = read_vidur_all_reduce_profile(in, "fuzz", tp + 1);
      for (double e : {0.0, 1.0, 4096.0, 1e7, 1e12}) sane(a.seconds_for(e));
    } catch (const weft::error&) {
    }
  }
  return 0;
}
