#!/usr/bin/env bash
# `conan create` of weft with its test_package, using the system's Boost, Eigen and oneTBB (declared
# as platform requirements in tests/package/conan-system.profile, so nothing is downloaded).
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

mkdir -p "$CONAN_HOME"
conan profile detect --force > /dev/null 2>&1
# The detected profile may say gnu17; weft needs C++20.
sed -i 's/^compiler.cppstd=.*/compiler.cppstd=gnu20/' "$CONAN_HOME/profiles/default"
echo "conan: conan create (test_package builds against the packaged headers)"
conan create "$root" --profile:host="$root/tests/package/conan-system.profile" \
  --profile:build=default --build=missing --no-remote > "$root/build/conan.log" 2>&1 || { tail -40 "$root/build/conan.log"; exit 1; }
grep "weft .* from Conan" "$root/build/conan.log"
echo "conan: create passed"
