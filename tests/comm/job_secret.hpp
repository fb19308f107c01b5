// Test helper: gives this test process a job secret, as fork_ranks and spawn_ranks give the ranks
// they start, so the tcp and elastic jobs a test forms from threads or plain fork() authenticate
// (weft refuses to form one without a secret unless allow_unauthenticated). Including the header is
// enough; a WEFT_JOB_SECRET already set is kept. Tests of jobs without a secret call
// without_job_secret() in the process that must have none.
#pragma once

#include <cstdlib>

namespace weft_test {

inline constexpr const char* test_job_secret = "weft's test suite job secret, 0123456789";

inline const bool job_secret_set = [] {
  ::setenv("WEFT_JOB_SECRET", test_job_secret, 0);
  return true;
}();

/// Removes WEFT_JOB_SECRET from this process's environment (call it before threads start).
inline void without_job_secret() { ::unsetenv("WEFT_JOB_SECRET"); }

}  // namespace weft_test
