// Internal: the agreement every collective reaches before it acts. Each rank proposes its call (a
// digest of its collective_descriptor, whether its own arguments were valid and, for alltoallv, a
// balance of its counts); the proposals are allgathered with Bruck's algorithm (Bruck, Ho, Kipnis,
// Upfal & Weathersby, IEEE TPDS 8(11), 1997: ceil(log2 p) rounds of one sendrecv), and every rank
// draws the same verdict from the same p proposals. So either every rank goes on, or every rank
// throws, before any data moves and naming the same rank; none returns success from a call its
// peers disagree with, and none learns of it one call late. Only after a disagreement is a second
// allgather made, of the full descriptors (and counts), for the error's field and values.
#pragma once

#include <weft/comm/comm_error.hpp>
#include <weft/comm/concepts.hpp>
#include <weft/comm/descriptor.hpp>
#include <weft/comm/detail/context.hpp>
#include <weft/comm/options.hpp>
#include <weft/core/error.hpp>
#include <weft/core/hash.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace weft::comm::detail {

/// The check word of agreement messages: the same on every rank whatever it proposes (collective
/// bits 0, which no collective's check word has), so proposals always match as messages and are
/// compared as data.
inline constexpr std::uint32_t agreement_check = 0xa9e0'0000u;

/// What this rank asks of one collective call. Built by the collective's entry point: the
/// descriptor, then require() for each rule its arguments must keep. Not thread-safe (one call's).
class proposal {
 public:
  /// Starts a proposal for a call with these options: their own rules (a positive timeout and
  /// segment size) are the first requirements. The deadline runs from here.
  proposal(const char* where, const options& opt) : where_(where), channel_(opt.channel) {
    require([&] { check_call_options(where, opt); });
    until_ = clock_type::now() + (opt.timeout.count() > 0 ? opt.timeout : options{}.timeout);
  }

  /// Runs check(); a weft::error it throws becomes this rank's refusal (the first one counts). The
  /// refusal is not thrown here: the rank still takes part in the agreement, so that its peers fail
  /// at once instead of at their deadline, and agree() throws it afterwards. O(check).
  template <class Fn>
  void require(Fn&& check) {
    if (refused_) return;
    try {
      check();
    } catch (const error& e) {
      refused_ = std::current_exception();
      refusal_ = e.what();
    }
  }
  bool refused() const noexcept { return static_cast<bool>(refused_); }
  /// The name the agreement's errors give the call (e.g. "weft::comm::allreduce[ring]" once the
  /// algorithm is known); a string literal or other storage that outlives the call.
  void rename(const char* where) noexcept { where_ = where; }

  collective_descriptor desc{};
  /// alltoallv: every rank's counts cancel out over the group exactly when each send count equals
  /// its receiver's receive count (see count_balance); 0 for every other collective.
  std::uint64_t balance = 0;
  std::span<const std::size_t> sends{}, recvs{};  ///< alltoallv: the counts, for the diagnosis

  const char* where() const noexcept { return where_; }
  std::uint32_t channel() const noexcept { return channel_; }
  deadline until() const noexcept { return until_; }
  const std::exception_ptr& refusal_error() const noexcept { return refused_; }
  const std::string& refusal() const noexcept { return refusal_; }

 private:
  const char* where_;
  std::uint32_t channel_;
  deadline until_{};
  std::exception_ptr refused_;
  std::string refusal_;
};

/// Hash of a host map (hierarchical): its length, then every host id, in rank order. O(p).
inline std::uint64_t hash_hosts(std::span<const int> hosts) noexcept {
  std::uint64_t h = hash_combine(0x686f737473ull, hosts.size());  // "hosts"
  for (int x : hosts) h = hash_combine(h, static_cast<std::uint64_t>(static_cast<std::uint32_t>(x)));
  return h;
}

/// alltoallv's term of rank `me`: the hashes of every (me → q, sends[q]) minus those of every
/// (s → me, recvs[s]), mod 2^64. Summed over the group it is 0 when every pair agrees (each
/// (src, dst, count) is added by its sender and taken away by its receiver), and not 0, but for a
/// 2^-64 chance, when one pair differs. O(p).
inline std::uint64_t count_balance(int me, std::span<const std::size_t> sends, std::span<const std::size_t> recvs) {
  auto term = [](std::size_t src, std::size_t dst, std::size_t n) {
    return hash_combine(hash_combine(hash_combine(0x636f756e7473ull, src), dst), n);  // "counts"
  };
  const auto m = static_cast<std::size_t>(me);
  std::uint64_t b = 0;
  for (std::size_t q = 0; q < sends.size(); ++q) b += term(m, q, sends[q]);
  for (std::size_t s = 0; s < recvs.size(); ++s) b -= term(s, m, recvs[s]);
  return b;
}

/// Bruck's allgather of one fixed-size block per rank: round k sends the 2^k blocks this rank has
/// (its own and its successors') to rank r - 2^k and receives as many from r + 2^k, so after
/// ceil(log2 p) rounds every rank holds all p. Returns them in rank order. O(p·block) bytes, one
/// sendrecv per round.
template <class Ctx>
void allgather_blocks(Ctx& c, std::span<const std::byte> mine, std::span<std::byte> all) {
  const int p = c.size(), r = c.rank();
  const std::size_t v = mine.size();
  std::memcpy(all.data(), mine.data(), v);  // slot i holds rank (r + i) mod p
  for (int d = 1; d < p; d <<= 1) {
    const auto n = static_cast<std::size_t>(std::min(d, p - d));
    c.phase("agreement", d);
    c.sendrecv(mod(r - d, p), std::span<const std::byte>(all.data(), n * v), mod(r + d, p),
               all.subspan(static_cast<std::size_t>(d) * v, n * v));
  }
  std::rotate(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>((p - r) % p) * v),
              all.end());
}

/// One rank's vote: digest of its descriptor, whether it refused, its count balance.
inline constexpr std::size_t vote_bytes = 24;
/// The verdict every rank draws from the same votes.
struct verdict {
  enum class kind : std::uint8_t { agreed, refused, differ, counts } what = kind::agreed;
  int blamed = -1;     ///< refused: the lowest refusing rank; differ: the lowest rank off the majority
  int reference = -1;  ///< differ: the lowest rank of the majority (whom the blamed rank is compared with)
  int majority = 0;    ///< differ: how many ranks propose the majority's call
};

/// Refusals first (the lowest refusing rank is blamed); then the descriptors: the digest most ranks
/// hold (ties: the one the lowest rank holds) is the call, and the lowest rank holding another is
/// blamed; then the counts. The same on every rank for the same votes. O(p · distinct digests).
inline verdict judge(std::span<const std::byte> votes, int p) {
  verdict v;
  auto at = [&](int q) { return votes.data() + static_cast<std::size_t>(q) * vote_bytes; };
  for (int q = 0; q < p; ++q)
    if (get_le<std::uint32_t>(at(q) + 8) != 0) {
      v.what = verdict::kind::refused;
      v.blamed = q;
      return v;
    }
  // The common case, every rank proposing the same call, allocates nothing.
  bool same = true;
  for (int q = 1; q < p && same; ++q) same = get_le<std::uint64_t>(at(q)) == get_le<std::uint64_t>(at(0));
  if (same) {
    std::uint64_t sum = 0;
    for (int q = 0; q < p; ++q) sum += get_le<std::uint64_t>(at(q) + 16);
    if (sum != 0) v.what = verdict::kind::counts;
    return v;
  }
  struct tally {
    std::uint64_t digest;
    int votes, first;
  };
  std::vector<tally> seen;
  for (int q = 0; q < p; ++q) {
    const auto d = get_le<std::uint64_t>(at(q));
    auto it = std::find_if(seen.begin(), seen.end(), [&](const tally& t) { return t.digest == d; });
    if (it == seen.end())
      seen.push_back({d, 1, q});
    else
      ++it->votes;
  }
  const tally* best = &seen.front();  // in order of first rank: ties stay with the lowest
  for (const auto& t : seen)
    if (t.votes > best->votes) best = &t;
  v.what = verdict::kind::differ;
  v.reference = best->first;
  v.majority = best->votes;
  for (int q = 0; q < p && v.blamed < 0; ++q)
    if (get_le<std::uint64_t>(at(q)) != best->digest) v.blamed = q;
  return v;
}

/// Bytes of a refusal's text carried to the other ranks (longer ones are cut).
inline constexpr std::size_t refusal_text_bytes = 254;

/// The comm_error of a disagreement found by the agreement, for rank r: the same blamed rank on
/// every rank, the field and values as this rank sees them. `blobs` are every rank's details
/// (descriptor, refusal text, counts), `detail_bytes` each.
inline comm_error disagreement_error(const proposal& call, const verdict& v, int r, int p,
                                     std::span<const std::byte> blobs, std::size_t detail_bytes) {
  auto blob = [&](int q) { return blobs.data() + static_cast<std::size_t>(q) * detail_bytes; };
  auto desc_of = [&](int q) {
    return decode(std::span<const std::byte, descriptor_wire_bytes>(blob(q), descriptor_wire_bytes));
  };
  failure_info info;
  info.rank = r;
  info.size = p;
  info.origin = r;  // every rank found it, in the same round
  info.blamed = v.blamed;
  info.collective = call.where();
  info.channel = call.channel();
  info.phase = "agreement";
  if (v.what == verdict::kind::refused) {
    const std::byte* t = blob(v.blamed) + descriptor_wire_bytes;
    const std::size_t len = std::min<std::size_t>(get_le<std::uint16_t>(t), refusal_text_bytes);
    std::string text(reinterpret_cast<const char*>(t + 2), len);
    for (char& ch : text)
      if (static_cast<unsigned char>(ch) < 0x20) ch = '?';
    info.field = "arguments";
    info.here = "accepted";
    info.there = text;
    info.detail = concat("rank ", v.blamed, " refused its arguments, so no rank runs the call: ", text);
  } else if (v.what == verdict::kind::differ) {
    const int other = r == v.blamed ? v.reference : v.blamed;
    const auto diff = first_difference(call.desc, desc_of(other));
    if (diff) {
      info.field = diff->field;
      info.here = diff->here;
      info.there = diff->there;
      info.detail = "the ranks disagree about the collective: " + explain(*diff, other);
      if (r == v.blamed)
        info.detail += concat(" (this rank is held responsible: ", v.majority, " of the ", p, " ranks propose rank ",
                              v.reference, "'s call", v.majority * 2 == p ? ", and it is the lower rank" : "", ")");
    } else {  // the digests differ but no field does: bytes outside the fields (a corrupted peer)
      info.field = "descriptor";
      info.detail = concat("the ranks disagree about the collective: rank ", v.blamed, "'s descriptor differs");
    }
  } else {
    // counts: the first (source, destination) pair, in rank order, whose send and receive counts differ
    auto count_at = [&](int q, bool recv, int k) {
      const std::byte* c = blob(q) + descriptor_wire_bytes + 2 + refusal_text_bytes +
                           (recv ? static_cast<std::size_t>(p) * 8 : 0) + static_cast<std::size_t>(k) * 8;
      return get_le<std::uint64_t>(c);
    };
    int src = -1, dst = -1;
    for (int s = 0; s < p && src < 0; ++s)
      for (int d = 0; d < p; ++d)
        if (count_at(s, false, d) != count_at(d, true, s)) {
          src = s;
          dst = d;
          break;
        }
    info.field = "alltoallv counts";
    if (src >= 0) {
      const auto sent = count_at(src, false, dst), expected = count_at(dst, true, src);
      info.blamed = src;
      info.here = concat("rank ", src, " sends ", sent);
      info.there = concat("rank ", dst, " expects ", expected);
      info.detail = concat("alltoallv counts disagree: rank ", src, " sends ", sent, " elements to rank ", dst,
                           ", which expects ", expected, " from it");
    } else {  // the balances did not cancel, yet every pair agrees: a corrupted peer
      info.detail = "alltoallv counts disagree (the ranks' count balances do not cancel out)";
    }
  }
  return comm_error(errc::mismatch, call.where(), std::move(info));
}

/// Reaches agreement on `call` with every rank of t (see the header). Returns when every rank
/// proposed the same call and none refused its arguments. Otherwise throws, on every rank alike:
/// a rank whose own arguments were bad rethrows that weft::error; the others throw
/// comm_error(errc::mismatch) naming the same blamed rank (the refusing one, the one off the
/// majority's descriptor, or the sender of the first alltoallv count its receiver does not
/// expect), with the field and both values. Such a failure leaves the transport usable: every
/// message of the agreement was received. A failure of the transport itself (a timeout, a dead
/// peer) is thrown as the collectives throw it (a refusing rank throws its refusal instead).
/// Cost: ceil(log2 p) sendrecvs of at most p·24 bytes; p == 1 sends nothing.
template <transport Tr>
void agree(Tr& t, const proposal& call) {
  const int p = static_cast<int>(t.size()), r = static_cast<int>(t.rank());
  if (p == 1) {
    if (call.refused()) std::rethrow_exception(call.refusal_error());
    return;
  }
  std::array<std::byte, vote_bytes> mine{};
  {
    std::array<std::byte, descriptor_wire_bytes> d{};
    encode(call.desc, std::span<std::byte, descriptor_wire_bytes>(d));
    put_le<std::uint64_t>(mine.data(), hash_bytes(std::span<const std::byte>(d)));
    put_le<std::uint32_t>(mine.data() + 8, call.refused() ? 1u : 0u);
    put_le<std::uint64_t>(mine.data() + 16, call.balance);
  }
  call_context c(t, call.where(), msg_tag{call.channel(), agreement_check}, call.until());
  // Up to 32 ranks' votes on the stack: the agreement of a small group allocates nothing.
  std::array<std::byte, 32 * vote_bytes> inline_votes;
  std::vector<std::byte> heap_votes;
  std::span<std::byte> votes;
  if (static_cast<std::size_t>(p) * vote_bytes <= inline_votes.size()) {
    votes = std::span<std::byte>(inline_votes.data(), static_cast<std::size_t>(p) * vote_bytes);
  } else {
    heap_votes.resize(static_cast<std::size_t>(p) * vote_bytes);
    votes = heap_votes;
  }
  verdict v;
  std::vector<std::byte> blobs;
  std::size_t detail_bytes = 0;
  try {
    allgather_blocks(c, std::span<const std::byte>(mine), votes);
    v = judge(votes, p);
    if (v.what == verdict::kind::agreed) return;
    // Every rank judged alike: every rank takes part in the second round, for the details.
    detail_bytes = descriptor_wire_bytes + 2 + refusal_text_bytes +
                   (v.what == verdict::kind::counts ? 16 * static_cast<std::size_t>(p) : 0);
    std::vector<std::byte> own(detail_bytes);
    encode(call.desc, std::span<std::byte, descriptor_wire_bytes>(own.data(), descriptor_wire_bytes));
    const std::size_t len = std::min(call.refusal().size(), refusal_text_bytes);
    put_le<std::uint16_t>(own.data() + descriptor_wire_bytes, static_cast<std::uint16_t>(len));
    std::memcpy(own.data() + descriptor_wire_bytes + 2, call.refusal().data(), len);
    if (v.what == verdict::kind::counts) {
      std::byte* at = own.data() + descriptor_wire_bytes + 2 + refusal_text_bytes;
      for (std::size_t q = 0; q < static_cast<std::size_t>(p); ++q) {
        put_le<std::uint64_t>(at + q * 8, q < call.sends.size() ? call.sends[q] : 0);
        put_le<std::uint64_t>(at + (static_cast<std::size_t>(p) + q) * 8, q < call.recvs.size() ? call.recvs[q] : 0);
      }
    }
    blobs.resize(detail_bytes * static_cast<std::size_t>(p));
    allgather_blocks(c, std::span<const std::byte>(own), std::span<std::byte>(blobs));
  } catch (...) {
    if (call.refused()) std::rethrow_exception(call.refusal_error());  // it says more than the transport
    throw;
  }
  if (call.refused()) std::rethrow_exception(call.refusal_error());
  throw disagreement_error(call, v, r, p, blobs, detail_bytes);
}

}  // namespace weft::comm::detail
