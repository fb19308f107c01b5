// Error feedback (a.k.a. error compensation / memory): the part of a gradient a lossy compressor
// dropped is kept and added to the next step's gradient, which restores convergence of top-k,
// random-k and low-bit quantization (Seide et al. 2014; Karimireddy et al., "Error feedback fixes
// SignSGD", ICML 2019; Stich et al. 2018).
#pragma once

#include <weft/core/error.hpp>

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

namespace weft::comm::compress {

/// The residual of one tensor. compressed_allreduce adds it to the input before compressing and
/// stores what the compression of this rank's contribution lost. Not thread-safe; one per tensor
/// per rank. Memory O(n).
class error_feedback {
 public:
  /// A zero residual for a tensor of n floats. O(n).
  explicit error_feedback(std::size_t n) : residual_(n, 0.0f) {}

  std::size_t size() const noexcept { return residual_.size(); }
  std::span<const float> residual() const noexcept { return residual_; }
  std::span<float> residual() noexcept { return residual_; }
  /// Forgets the residual (e.g. after the model was reloaded). O(n).
  void reset() noexcept { std::fill(residual_.begin(), residual_.end(), 0.0f); }

  /// data += residual. Throws errc::invalid_argument when the sizes differ. O(n).
  void compensate(std::span<float> data) const {
    check(data.size(), "compensate");
    for (std::size_t i = 0; i < data.size(); ++i) data[i] += residual_[i];
  }
  /// residual = sent - received: what the compressor dropped of `sent`. O(n).
  void record(std::span<const float> sent, std::span<const float> received) {
    check(sent.size(), "record");
    check(received.size(), "record");
    for (std::size_t i = 0; i < sent.size(); ++i) residual_[i] = sent[i] - received[i];
  }

 private:
  void check(std::size_t n, const char* fn) const {
    expects(n == residual_.size(), errc::invalid_argument, "weft::comm::compress::error_feedback", fn, ": tensor has ",
            n, " elements but the residual was made for ", residual_.size());
  }
  std::vector<float> residual_;
};

}  // namespace weft::comm::compress
