// The state an elastic group keeps bit-identical across its members: a list of tensors (dtype,
// shape, bytes) and a revision number, hashed per revision so members can vote on it (majority
// wins) and a newcomer or laggard can pull it and re-verify (as in PCCL's shared-state sync).
#pragma once

#include <weft/core/dtype.hpp>
#include <weft/core/error.hpp>
#include <weft/core/hash.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <sstream>
#include <string>
#include <vector>

namespace weft::comm::elastic {

/// Deprecated: the one fast hash is weft::hash_bytes (weft/core/hash.hpp); this forwarder stays for
/// one release. Not cryptographic: it catches divergence, not malice.
[[deprecated("use weft::hash_bytes from weft/core/hash.hpp")]] inline std::uint64_t hash_bytes(
    std::span<const std::byte> bytes, std::uint64_t seed) noexcept {
  return weft::hash_bytes(bytes, seed);
}

/// The state shared by an elastic group. The user registers views of their tensors (borrowed:
/// they must outlive this object) and advances revision() after each step in a deterministic way;
/// spec() is what joining members must match. Not thread-safe. hash() is O(total bytes).
class shared_state {
 public:
  struct tensor {
    std::string name;
    dtype type;
    std::vector<std::size_t> shape;
    std::span<std::byte> bytes;
  };

  /// Registers a tensor of the given shape over `data`. Throws errc::invalid_argument when the
  /// shape's product differs from data.size() or the name is empty or taken.
  template <element_type T>
  shared_state& add(std::string name, std::span<T> data, std::vector<std::size_t> shape = {}) {
    constexpr const char* where = "weft::comm::elastic::shared_state::add";
    if (shape.empty()) shape = {data.size()};
    std::size_t count = 1;
    for (auto d : shape) count *= d;
    expects(count == data.size(), errc::invalid_argument, where, "tensor '", name, "' has ", data.size(),
            " elements but its shape holds ", count);
    expects(!name.empty() && name.find_first_of(" ,;[]:") == std::string::npos, errc::invalid_argument, where,
            "tensor name '", name, "' must be non-empty without spaces or ,;[]:");
    for (const auto& t : tensors_)
      expects(t.name != name, errc::already_exists, where, "a tensor named '", name, "' is already registered");
    tensors_.push_back({std::move(name), dtype_of<T>, std::move(shape), std::as_writable_bytes(data)});
    return *this;
  }

  const std::vector<tensor>& tensors() const noexcept { return tensors_; }
  std::uint64_t revision() const noexcept { return revision_; }
  void set_revision(std::uint64_t r) noexcept { revision_ = r; }
  /// revision += 1; call after every deterministic step.
  void advance() noexcept { ++revision_; }

  /// "name:f32[3x4];bias:f32[4]": what a joining member must match exactly. O(tensors).
  std::string spec() const {
    std::ostringstream out;
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      if (i) out << ';';
      out << tensors_[i].name << ':' << to_string(tensors_[i].type) << '[';
      for (std::size_t d = 0; d < tensors_[i].shape.size(); ++d) out << (d ? "x" : "") << tensors_[i].shape[d];
      out << ']';
    }
    return out.str();
  }
  /// Hash of the revision and every tensor's bytes, in order.
  std::uint64_t hash() const noexcept {
    std::uint64_t h = weft::hash_bytes(std::as_bytes(std::span<const std::uint64_t>(&revision_, 1)), 0x77656674);
    for (const auto& t : tensors_) h = weft::hash_bytes(t.bytes, h);
    return h;
  }
  /// Total bytes of all tensors.
  std::size_t bytes() const noexcept {
    std::size_t n = 0;
    for (const auto& t : tensors_) n += t.bytes.size();
    return n;
  }

 private:
  std::vector<tensor> tensors_;
  std::uint64_t revision_ = 0;
};

}  // namespace weft::comm::elastic
