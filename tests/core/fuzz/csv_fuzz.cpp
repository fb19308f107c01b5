// libFuzzer harness: core/csv.hpp over arbitrary bytes. A parse error is the expected outcome for
// malformed input; anything else (a crash, a sanitizer report, another exception type) is a finding.
#include <weft/core/csv.hpp>

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  try {
    weft::csv_reader r(in, "fuzz", {.max_record_bytes = 4096, .max_fields = 64, .max_records = 1000});
    while (r.next()) {
      for (std::size_t i = 0; i < r.size(); ++i) {
        try {
          (void)r.number<std::int64_t>(i);
        } catch (const weft::error&) {
        }
        try {
          (void)r.number<double>(i);
        } catch (const weft::error&) {
        }
      }
    }
  } catch (const weft::error&) {
  }
  return 0;
}
