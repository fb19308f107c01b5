// Deprecated header, kept for one release: weft::moe::any_eviction_policy was renamed
// weft::moe::any_expert_eviction_policy (it clashed with weft::kv::any_eviction_policy).
#pragma once

#include <weft/moe/any_expert_eviction_policy.hpp>
