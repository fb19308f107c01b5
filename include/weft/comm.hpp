// weft::comm umbrella: transports (inproc, shm, tcp; mpi via <weft/comm/mpi_transport.hpp> when
// MPI is available), collectives, tuner, non-blocking forms and the local launcher.
#pragma once

#include <weft/comm/allreduce.hpp>
#include <weft/comm/any_transport.hpp>
#include <weft/comm/calibrate.hpp>
#include <weft/comm/collectives.hpp>
#include <weft/comm/concepts.hpp>
#include <weft/comm/group_view.hpp>
#include <weft/comm/inproc_transport.hpp>
#include <weft/comm/launcher.hpp>
#include <weft/comm/nonblocking.hpp>
#include <weft/comm/options.hpp>
#include <weft/comm/shm_transport.hpp>
#include <weft/comm/tcp_transport.hpp>
#include <weft/comm/tuner.hpp>
