// Must not compile (ctest coding.misspelled_hook): the code opts in to the kind() hook
// (provides_kind = true) but misspells it, and reports_code_kind's static_assert says how to fix it.
// Without the opt-in the hook would be silently ignored (tests/coding/archetype_test.cpp).
#include <weft/coding/concepts.hpp>

namespace {

struct misspelled_code {
  static constexpr bool provides_kind = true;
  weft::coding::code_kind kidn() const { return weft::coding::code_kind::approximate; }  // "kidn"
};

}  // namespace

bool detected() { return weft::coding::reports_code_kind<misspelled_code>; }
