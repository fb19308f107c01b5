#!/usr/bin/env bash
# The README's Conan way, verbatim (tests/package/readme.sh Conan): `conan create` of a clone (its
# test_package/ builds against the packaged headers), then a consumer with CMakeDeps. Conan gets a
# default profile whose [platform_requires] are the system's Boost, Eigen, oneTBB and OpenSSL
# (tests/package/conan-system.profile) and no remote, so nothing is downloaded.
# Installs Conan 2 from PyPI when missing; skips with a message only when PyPI cannot be reached.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export CONAN_HOME="$root/build/conan-home"

if ! command -v conan >/dev/null || ! conan --version 2>/dev/null | grep -q "Conan version 2"; then
  echo "conan: installing Conan 2 from PyPI"
  if ! python3 -m pip install --quiet "conan>=2.0,<3" 2>/dev/null &&
     ! python3 -m pip install --quiet --break-system-packages "conan>=2.0,<3" 2>/dev/null; then
    echo "conan: SKIPPED: PyPI cannot be reached to install Conan 2 (pip install conan)"
    exit 0
  fi
  hash -r
fi

rm -rf "$CONAN_HOME"
mkdir -p "$CONAN_HOME"
conan profile detect --force > /dev/null 2>&1
profile="$CONAN_HOME/profiles/default"
# The detected profile may say gnu17; weft needs C++20. The system's packages stand in for Conan's.
sed -i 's/^compiler.cppstd=.*/compiler.cppstd=gnu20/' "$profile"
grep -v '^include(' "$root/tests/package/conan-system.profile" >> "$profile"
conan remote remove conancenter > /dev/null 2>&1 || true
echo "conan: the README's Conan way (conan create, then a CMakeDeps consumer)"
"$root/tests/package/readme.sh" Conan
grep -h "weft .* from Conan" "$root/build/package/readme/Conan/log" || true
echo "conan: passed"
