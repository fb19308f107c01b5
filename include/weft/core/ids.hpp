// The identifiers that more than one module speaks: a serving request, the tenant (client) it is
// charged to, and a token id. weft::kv and weft::sched both use these, so a scheduler's request id is
// the KV manager's request id and a fair queue's client is the KV quota's tenant.
#pragma once

#include <weft/core/strong_id.hpp>

#include <cstdint>

namespace weft {

/// One generation request (a sequence), unique within a scheduler and a KV manager. Any value except
/// invalid() may be used.
using request_id = strong_id<struct request_id_tag, std::uint64_t>;

/// A tenant: the user, API key or application that fair queues share service between and KV block
/// quotas are charged to. weft::sched calls it client_id.
using tenant_id = strong_id<struct tenant_id_tag, std::uint32_t>;

/// A token id as the tokenizer produced it.
using token_id = std::int32_t;

}  // namespace weft
