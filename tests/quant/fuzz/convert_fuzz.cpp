// libFuzzer harness for the GPTQ and AWQ checkpoint converters (gptq.hpp, awq.hpp): the shape
// fields of a checkpoint come from its metadata, so K, N and the group size are taken from the
// input unchecked, next to tensors of whatever length the input holds. A weft::error is the
// expected outcome for malformed input; a crash, a sanitizer report or another exception is a
// finding. When a conversion succeeds, writing it back must give the same tensors (differential).
//
// Input: byte 0 = format (0 GPTQ v1, 1 GPTQ v2, 2 AWQ; bit 2: with g_idx), then K and N as
// little-endian int64, the group size as int32, the lengths of qweight, qzeros, scales and g_idx
// as uint16 each, then the tensors' words (int32; scales are fp16 bit patterns, two per word).
#include <weft/quant/awq.hpp>
#include <weft/quant/gptq.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

namespace {

struct reader {
  const std::uint8_t* data;
  std::size_t size;
  template <class T>
  T take() {
    T v{};
    const std::size_t n = size < sizeof(T) ? size : sizeof(T);
    std::memcpy(&v, data, n);
    data += n;
    size -= n;
    return v;
  }
  template <class T>
  std::vector<T> take_array(std::size_t count) {
    const std::size_t n = std::min(count, size / sizeof(T));
    std::vector<T> out(n);
    if (n != 0) std::memcpy(out.data(), data, n * sizeof(T));
    data += n * sizeof(T);
    size -= n * sizeof(T);
    return out;
  }
};

bool same_bits(std::span<const weft::half> a, std::span<const weft::half> b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].bits != b[i].bits) return false;
  return true;
}

void gptq(reader& in, std::int64_t k, std::int64_t n, int group, bool v2, bool with_g_idx, std::size_t lw,
          std::size_t lz, std::size_t ls, std::size_t lg) {
  namespace wq = weft::quant;
  const auto qweight = in.take_array<std::int32_t>(lw);
  const auto qzeros = in.take_array<std::int32_t>(lz);
  std::vector<weft::half> scales;
  for (std::uint16_t b : in.take_array<std::uint16_t>(ls)) scales.push_back(weft::half::from_bits(b));
  const auto g_idx = with_g_idx ? in.take_array<std::int32_t>(lg) : std::vector<std::int32_t>{};
  const wq::gptq_view<weft::half> view{k,      n,      group, qweight,
                                       qzeros, scales, g_idx, v2 ? wq::gptq_version::v2 : wq::gptq_version::v1};
  const auto imported = wq::from_gptq(view);
  // Round trip: every bit of the checkpoint comes back (v1 nibbles store zero - 1; a v2 zero of
  // 16 cannot come from a nibble, so to_gptq always succeeds here).
  const auto back = wq::to_gptq(imported.weights, imported.input_perm, view.version);
  if (back.qweight != qweight || back.qzeros != qzeros || !same_bits(back.scales, scales) || back.g_idx != g_idx)
    std::abort();
}

void awq(reader& in, std::int64_t k, std::int64_t n, int group, std::size_t lw, std::size_t lz, std::size_t ls) {
  namespace wq = weft::quant;
  const auto qweight = in.take_array<std::int32_t>(lw);
  const auto qzeros = in.take_array<std::int32_t>(lz);
  std::vector<weft::half> scales;
  for (std::uint16_t b : in.take_array<std::uint16_t>(ls)) scales.push_back(weft::half::from_bits(b));
  const auto w = wq::from_awq(wq::awq_view<weft::half>{k, n, group, qweight, qzeros, scales});
  const auto back = wq::to_awq(w);
  if (back.qweight != qweight || back.qzeros != qzeros || !same_bits(back.scales, scales)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  reader in{data, size};
  const auto format = in.take<std::uint8_t>();
  const auto k = in.take<std::int64_t>();
  const auto n = in.take<std::int64_t>();
  const auto group = in.take<std::int32_t>();
  const std::size_t lw = in.take<std::uint16_t>(), lz = in.take<std::uint16_t>(), ls = in.take<std::uint16_t>(),
                    lg = in.take<std::uint16_t>();
  try {
    switch (format & 3) {
      case 0:
      case 1:
        gptq(in, k, n, group, (format & 3) == 1, (format & 4) != 0, lw, lz, ls, lg);
        break;
      default:
        awq(in, k, n, group, lw, lz, ls);
        break;
    }
  } catch (const weft::error&) {
  }
  return 0;
}
