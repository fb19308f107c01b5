// A sub-group of a transport: ranks [0, members.size()) of the view are members[i] of the parent.
// The hierarchical allreduce runs its inter-host phase over such a view of the host leaders.
#pragma once

#include <weft/comm/comm_error.hpp>
#include <weft/comm/concepts.hpp>
#include <weft/comm/descriptor.hpp>
#include <weft/core/error.hpp>

#include <algorithm>
#include <span>
#include <string_view>
#include <vector>

namespace weft::comm {

/// Satisfies transport (and abortable_transport when the parent does). Thread-safety is the
/// parent's. O(1) per call plus the parent's cost; construction O(members).
template <transport Parent>
class group_view {
 public:
  static constexpr bool thread_safe_channels = concurrent_transport<Parent>;

  /// members: parent ranks, distinct, each in [0, parent.size()), including parent.rank().
  group_view(Parent& parent, std::vector<int> members) : parent_(&parent), members_(std::move(members)) {
    const int p = static_cast<int>(parent.size());
    for (int m : members_)
      expects(m >= 0 && m < p, errc::out_of_range, "weft::comm::group_view", "member ", m, " is outside [0, ", p, ")");
    auto sorted = members_;
    std::sort(sorted.begin(), sorted.end());
    expects(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(), errc::invalid_argument,
            "weft::comm::group_view", "members must be distinct");
    const auto it = std::find(members_.begin(), members_.end(), static_cast<int>(parent.rank()));
    expects(it != members_.end(), errc::invalid_argument, "weft::comm::group_view", "parent rank ", parent.rank(),
            " is not a member");
    rank_ = static_cast<int>(it - members_.begin());
  }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return static_cast<int>(members_.size()); }

  void send(int peer, msg_tag tag, std::span<const std::byte> bytes, deadline until) {
    parent_->send(map(peer), tag, bytes, until);
  }
  void recv(int peer, msg_tag tag, std::span<std::byte> bytes, deadline until) {
    parent_->recv(map(peer), tag, bytes, until);
  }
  void sendrecv(int dst, std::span<const std::byte> out, int src, std::span<std::byte> in, msg_tag tag,
                deadline until) {
    parent_->sendrecv(map(dst), out, map(src), in, tag, until);
  }
  /// The transport this is a view of, and view rank r's rank there (errors name ranks as the whole
  /// group numbers them: detail::global_rank). Throws errc::invalid_argument for r outside the view.
  const Parent& parent() const noexcept { return *parent_; }
  int parent_rank(int r) const { return map(r); }

  void abort(std::string_view why) requires abortable_transport<Parent> { parent_->abort(why); }
  void abort(const comm_error& e) requires failure_carrying_transport<Parent> { parent_->abort(e); }
  /// Declares a collective of this view's members to the parent (descriptor.hpp): members are
  /// view ranks, empty for the whole view.
  void begin_collective(std::uint32_t channel, const collective_descriptor& d,
                        std::span<const int> members) requires descriptor_checking_transport<Parent> {
    std::vector<int> mapped;
    if (members.empty())
      mapped = members_;
    else
      for (int m : members) mapped.push_back(map(m));
    parent_->begin_collective(channel, d, std::span<const int>(mapped));
  }

 private:
  int map(int peer) const {
    expects(peer >= 0 && peer < size(), errc::invalid_argument, "weft::comm::group_view", "peer ", peer,
            " is outside the group of ", size());
    return members_[static_cast<std::size_t>(peer)];
  }
  Parent* parent_;
  std::vector<int> members_;
  int rank_ = 0;
};

}  // namespace weft::comm
