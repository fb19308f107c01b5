// Runs under mpiexec -n 4: every algorithm and collective over weft's MPI transport, checked
// against the serial reference; also a count mismatch that must be reported, not hang.
#include "process_check.hpp"

#include <weft/comm/mpi_transport.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int failed = 0;
  try {
    weft::comm::mpi_transport t;
    const auto P = static_cast<std::size_t>(t.size());
    weft_test::check_all_collectives(t, {0, 1, P - 1, 4 * P + 3, 70'001, (std::size_t{3} << 20) / 4 + 5}, 1 << 16);
    // A receive of the wrong length is a mismatch on the receiving rank.
    if (t.size() >= 2 && t.rank() < 2) {
      std::vector<std::byte> buf(t.rank() == 0 ? 16 : 8);
      const auto until = weft::comm::clock_type::now() + std::chrono::seconds(10);
      if (t.rank() == 0) {
        t.send(1, {}, buf, until);
      } else {
        try {
          t.recv(0, {}, buf, until);
          std::fprintf(stderr, "rank 1: an oversized message was accepted\n");
          failed = 1;
        } catch (const weft::error& e) {
          if (static_cast<weft::errc>(e.code().value()) != weft::errc::mismatch) failed = 1;
        }
      }
    }
    if (t.rank() == 0) std::printf("comm.mpi: %d ranks, all collectives correct\n", t.size());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "comm.mpi failed: %s\n", e.what());
    failed = 1;
  }
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}
