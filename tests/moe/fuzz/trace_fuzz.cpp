// libFuzzer harness: moe::read_csv (routing traces) over arbitrary bytes. A weft::error is the
// expected outcome for malformed input; a crash, a sanitizer report, another exception type
// (std::bad_alloc from a header that claims a huge model) or a slow input is a finding.
#include <weft/moe/trace.hpp>

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  try {
    const weft::moe::routing_trace t = weft::moe::read_csv(in);
    (void)t.lookups();
  } catch (const weft::error&) {
  }
  return 0;
}
