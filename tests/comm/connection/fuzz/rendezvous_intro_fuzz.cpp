// libFuzzer harness: the tcp rendezvous as rank 0 and as a registering rank sees it — the
// handshake (hello, proof, verdict) fed in chunks of any size, rank 0's admission rule, then the
// rank table a rank reads back. A weft::error or a failed handshake is the expected outcome for
// malformed input; anything else (a crash, a sanitizer report, another exception) is a finding.
// Byte 0 picks the secret (bit 0) and the chunk size (bits 1-7).
#include <weft/comm/detail/tcp_rendezvous.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace wd = weft::comm::detail;

namespace {
// Feeds `in` to hs `chunk` bytes at a time, discarding its output; returns the bytes it did not use.
std::span<const std::byte> feed(wd::handshake& hs, std::span<const std::byte> in, std::size_t chunk) {
  while (!in.empty() && hs.want() > 0) {
    const std::size_t used = hs.consume(in.first(std::min(chunk, in.size())));
    in = in.subspan(used);
    hs.sent(hs.output().size());
    if (used == 0) break;
  }
  hs.sent(hs.output().size());
  return in;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const bool with_secret = (data[0] & 1) != 0;
  const std::size_t chunk = 1 + (data[0] >> 1);
  const auto in = std::as_bytes(std::span<const std::uint8_t>(data + 1, size - 1));
  try {
    const wd::job_secret secret = with_secret ? wd::job_secret("the fuzzing job's secret") : wd::job_secret{};
    wd::wire_limits limits;
    std::vector<wd::rank_address> table(4);
    table[0] = {"127.0.0.1", 5000, 7};
    table[2] = {"10.0.0.2", 5002, 9};
    wd::peer_identity zero;
    zero.rank = 0;
    zero.size = 4;
    zero.count = 2;
    zero.instance = 7;
    zero.port = 5000;
    wd::handshake server(
        wd::handshake::role::server, wd::conn_kind::rendezvous, zero, secret,
        [&](const wd::peer_identity& p) { return wd::rendezvous_admission(p, 4, 2, table); }, limits);
    const auto rest = feed(server, in, chunk);
    try {
      (void)wd::decode_rank_table(rest, 4, limits, "fuzz");
    } catch (const weft::error&) {
    }
    wd::peer_identity one = zero;
    one.rank = 1;
    one.instance = 8;
    wd::handshake client(
        wd::handshake::role::client, wd::conn_kind::rendezvous, one, secret,
        [](const wd::peer_identity& p) { return p.rank == 0 ? std::string() : std::string("not rank 0"); }, limits);
    client.sent(client.output().size());
    const auto after = feed(client, in, chunk);
    if (client.state() == wd::handshake::status::done) {
      try {
        (void)wd::decode_rank_table(after, 4, limits, "fuzz");
      } catch (const weft::error&) {
      }
    }
  } catch (const weft::error&) {
  }
  return 0;
}
