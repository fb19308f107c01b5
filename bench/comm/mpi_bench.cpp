// OpenMPI's MPI_Allreduce (and weft's ring over weft::comm::mpi_transport) under mpirun, the
// same sweep and timing as bench_comm_allreduce. The BTL (vader = shared memory, tcp) is chosen
// by run.sh through OMPI_MCA_btl; --transport only labels the rows.
// Usage: mpirun -n N bench_comm_mpi --transport shm|tcp --ranks N [--min B] [--max B] ...
#include "common.hpp"

#include <weft/comm/allreduce.hpp>
#include <weft/comm/mpi_transport.hpp>

#include <chrono>
#include <vector>

#include <mpi.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  auto f = bench::parse(argc, argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  f.ranks = size;
  std::vector<float> buf(f.max_bytes / sizeof(float)), out(buf.size());
  weft::comm::mpi_transport t;
  for (std::size_t bytes : bench::sizes(f)) {
    const int n = static_cast<int>(bytes / sizeof(float));
    for (int which = 0; which < 2; ++which) {
      auto once = [&] {
        if (which == 0)
          MPI_Allreduce(buf.data(), out.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        else
          weft::comm::allreduce(t, std::span<float>(buf.data(), static_cast<std::size_t>(n)), weft::op::sum{},
                                weft::comm::options{.algo = weft::comm::algorithm::ring});
      };
      once();
      const int calls = bench::calls_for(f, bytes);
      std::vector<double> batches;
      for (int rep = 0; rep < f.reps; ++rep) {
        MPI_Barrier(MPI_COMM_WORLD);
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < calls; ++i) once();
        batches.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / calls);
      }
      double mine = bench::median(batches), slowest = 0;  // the slowest rank's median, as for weft
      MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (rank == 0)
        bench::row(f, which == 0 ? "openmpi" : "weft-mpi", f.transport, which == 0 ? "MPI_Allreduce" : "ring", bytes,
                   slowest);
    }
  }
  MPI_Finalize();
  return 0;
}
