// MPI transport: the same weft algorithms over MPI point-to-point (MPI-4 §3.7 non-blocking
// send/receive, polled against the deadline), so weft runs under mpirun/Slurm wherever MPI does.
// Needs <mpi.h> (link MPI::MPI_CXX); without it this header declares nothing.
#pragma once

#if __has_include(<mpi.h>)

#include <weft/comm/concepts.hpp>
#include <weft/core/error.hpp>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <thread>

#include <mpi.h>

namespace weft::comm {

/// Rank MPI_Comm_rank(comm) of MPI_Comm_size(comm). MPI must be initialised (MPI_Init) before
/// and finalised after; the communicator is duplicated so weft's messages never match the
/// application's. Message matching: MPI tag = channel mod 32768 (the MPI-guaranteed tag range);
/// the check word is not carried, but a message of the wrong length is errc::mismatch. Waits
/// poll MPI_Test, then yield, then sleep 20 us, so an oversubscribed host is not starved.
/// thread_safe_channels is false: MPI needs MPI_THREAD_MULTIPLE for that. abort() calls MPI_Abort.
class mpi_transport {
 public:
  static constexpr bool thread_safe_channels = false;

  explicit mpi_transport(MPI_Comm comm = MPI_COMM_WORLD) {
    int init = 0;
    MPI_Initialized(&init);
    expects(init != 0, errc::precondition, "weft::comm::mpi_transport", "MPI_Init has not been called");
    MPI_Comm_dup(comm, &comm_);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  mpi_transport(const mpi_transport&) = delete;
  mpi_transport& operator=(const mpi_transport&) = delete;
  ~mpi_transport() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }

  void send(int peer, msg_tag tag, std::span<const std::byte> bytes, deadline until) {
    check(peer, bytes.size(), "send");
    MPI_Request req;
    call(MPI_Isend(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, peer, mpi_tag(tag), comm_, &req), "send",
         peer);
    MPI_Request reqs[1] = {req};
    wait(reqs, 1, until, "send", peer, 0);
  }
  void recv(int peer, msg_tag tag, std::span<std::byte> bytes, deadline until) {
    check(peer, bytes.size(), "recv");
    MPI_Request reqs[1];
    call(MPI_Irecv(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, peer, mpi_tag(tag), comm_, &reqs[0]), "recv",
         peer);
    wait(reqs, 1, until, "recv", peer, bytes.size());
  }
  void sendrecv(int dst, std::span<const std::byte> out, int src, std::span<std::byte> in, msg_tag tag,
                deadline until) {
    check(dst, out.size(), "sendrecv");
    check(src, in.size(), "sendrecv");
    MPI_Request reqs[2];
    call(MPI_Irecv(in.data(), static_cast<int>(in.size()), MPI_BYTE, src, mpi_tag(tag), comm_, &reqs[1]), "sendrecv",
         src);
    call(MPI_Isend(out.data(), static_cast<int>(out.size()), MPI_BYTE, dst, mpi_tag(tag), comm_, &reqs[0]), "sendrecv",
         dst);
    wait(reqs, 2, until, "sendrecv", src, in.size());
  }
  /// Ends the whole MPI job (MPI has no gentler way to tell every rank). Does not return.
  void abort(std::string_view why) {
    std::fprintf(stderr, "weft::comm::mpi_transport: rank %d aborts the job: %.*s\n", rank_,
                 static_cast<int>(why.size()), why.data());
    MPI_Abort(comm_, 1);
  }

 private:
  static int mpi_tag(msg_tag tag) noexcept { return static_cast<int>(tag.channel % 32768u); }

  void check(int peer, std::size_t bytes, const char* what) const {
    expects(peer >= 0 && peer < size_ && peer != rank_, errc::invalid_argument, "weft::comm::mpi_transport", "rank ",
            rank_, " ", what, ": peer ", peer, " must be another rank in [0, ", size_, ")");
    expects(bytes <= static_cast<std::size_t>(INT_MAX), errc::invalid_argument, "weft::comm::mpi_transport", "rank ",
            rank_, " ", what, ": ", bytes, " bytes exceed MPI's int count");
  }
  void call(int rc, const char* what, int peer) const {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    weft::detail::raise(errc::peer_failure, "weft::comm::mpi_transport", "rank ", rank_, " ", what, " peer ", peer,
                        ": ", std::string(text, static_cast<std::size_t>(len)));
  }
  // Polls until every request completes; the last one (if a receive) is length-checked.
  void wait(MPI_Request* reqs, int n, deadline until, const char* what, int peer, std::size_t expect) {
    int spins = 0;
    for (;;) {
      int done = 0;
      MPI_Status st[2];
      const int rc = MPI_Testall(n, reqs, &done, st);
      if (rc != MPI_SUCCESS) {
        for (int i = 0; i < n; ++i) {
          if (st[i].MPI_ERROR == MPI_ERR_TRUNCATE)
            weft::detail::raise(errc::mismatch, "weft::comm::mpi_transport", "rank ", rank_, " ", what, " peer ", peer,
                                ": the peer sent more than the ", expect, " bytes this rank expects");
        }
        call(rc, what, peer);
      }
      if (done) {
        if (std::string_view(what) != "send") {
          int count = 0;
          MPI_Get_count(&st[n - 1], MPI_BYTE, &count);
          expects(static_cast<std::size_t>(count) == expect, errc::mismatch, "weft::comm::mpi_transport", "rank ",
                  rank_, " ", what, " peer ", peer, ": the peer sent ", count, " bytes but this rank expects ", expect);
        }
        return;
      }
      if (clock_type::now() >= until) {
        for (int i = 0; i < n; ++i)
          if (reqs[i] != MPI_REQUEST_NULL) {
            MPI_Cancel(&reqs[i]);
            MPI_Request_free(&reqs[i]);
          }
        weft::detail::raise(errc::timeout, "weft::comm::mpi_transport", "rank ", rank_, " ", what, " peer ", peer,
                            ": deadline passed");
      }
      if (++spins < 100)
        continue;
      else if (spins < 200)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
};

}  // namespace weft::comm

#endif  // __has_include(<mpi.h>)
