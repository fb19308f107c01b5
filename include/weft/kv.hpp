// Umbrella for weft::kv, the paged KV-cache bookkeeping: block pool, block tables with
// copy-on-write, hash-chained and radix-tree prefix caches, the host tier, admission control and
// the kv_manager facade a batch scheduler drives. Block keys use OpenSSL's libcrypto (SHA-256); the
// rest needs only the standard library.
#pragma once

#include <weft/kv/admission.hpp>
#include <weft/kv/any_eviction_policy.hpp>
#include <weft/kv/block_hasher.hpp>
#include <weft/kv/block_pool.hpp>
#include <weft/kv/block_table.hpp>
#include <weft/kv/cluster_pool.hpp>
#include <weft/kv/concepts.hpp>
#include <weft/kv/hashed_prefix_cache.hpp>
#include <weft/kv/host_tier.hpp>
#include <weft/kv/eviction.hpp>
#include <weft/kv/fast_block_hasher.hpp>
#include <weft/kv/kv_manager.hpp>
#include <weft/kv/radix_cache.hpp>
#include <weft/kv/sha256_block_hasher.hpp>
#include <weft/kv/similar_prompt_index.hpp>
#include <weft/kv/types.hpp>
