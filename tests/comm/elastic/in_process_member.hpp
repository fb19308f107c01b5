// Test helper for elastic groups whose members are threads of the test: a member's model (a vector
// registered as shared state) and the options a member joins the coordinator with.
#pragma once

#include <weft/comm/elastic.hpp>

#include <chrono>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace weft_test {

/// A member's model: 64 floats registered as the shared state "w".
struct elastic_model {
  std::vector<float> w = std::vector<float>(64, 0.0f);
  weft::comm::elastic::shared_state state;
  elastic_model() { state.add("w", std::span<float>(w)); }
};

/// Options of member `name` of coordinator c, with the given connect, collective and round timeouts.
inline weft::comm::elastic::group_options member_options(const weft::comm::elastic::coordinator& c, std::string name,
                                                         std::chrono::milliseconds connect,
                                                         std::chrono::milliseconds collective,
                                                         std::chrono::milliseconds round) {
  weft::comm::elastic::group_options o;
  o.coordinator_port = c.port();
  o.name = std::move(name);
  o.connect_timeout = connect;
  o.collective_timeout = collective;
  o.round_timeout = round;
  return o;
}

}  // namespace weft_test
