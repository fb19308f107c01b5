// weft::comm's fault-tolerant, elastic and compressed collectives (issue 4): compressors and the
// compressed / quantized-ring allreduce, fault injection and failure semantics, and elastic groups
// (coordinator, tcp mesh per membership epoch, shared-state sync, bandwidth-planned ring order).
// Needs Boost (Asio, Graph) through weft::comm. See docs/comm-elastic.md.
#pragma once

#include <weft/comm/compress/any_compressor.hpp>
#include <weft/comm/compress/block_quant.hpp>
#include <weft/comm/compress/cast.hpp>
#include <weft/comm/compress/compressed_allreduce.hpp>
#include <weft/comm/compress/concepts.hpp>
#include <weft/comm/compress/error_feedback.hpp>
#include <weft/comm/compress/metered_transport.hpp>
#include <weft/comm/compress/sparsify.hpp>
#include <weft/comm/elastic/coordinator.hpp>
#include <weft/comm/elastic/elastic_group.hpp>
#include <weft/comm/elastic/mesh_transport.hpp>
#include <weft/comm/elastic/ring_planner.hpp>
#include <weft/comm/elastic/shared_state.hpp>
#include <weft/comm/fault/failure.hpp>
#include <weft/comm/fault/fault_plan.hpp>
#include <weft/comm/fault/fault_transport.hpp>
#include <weft/comm/fault/tag_isolation.hpp>
