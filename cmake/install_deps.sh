#!/usr/bin/env bash
# Installs the Debian packages weft's build, tests, examples and benchmarks need, when missing.
# Usage: cmake/install_deps.sh [--demo] [--bench] [--check]
#   --demo   also what the worked examples draw their plots with (python3-matplotlib)
#   --bench  also the benchmark peers (Gloo, OpenMPI, oneDNN, Google Benchmark) and matplotlib
#   --check  only report what is missing; install nothing
# Not root and no sudo: prints the exact apt-get command to run and exits non-zero.
set -euo pipefail

want_bench=0
want_demo=0
check_only=0
for arg in "$@"; do
  case "$arg" in
    --bench) want_bench=1 ;;
    --demo) want_demo=1 ;;
    --check) check_only=1 ;;
    *) echo "install_deps.sh: unknown argument '$arg' (expected --demo, --bench or --check)" >&2; exit 2 ;;
  esac
done

# Build and test packages. Keep in step with cmake/WeftDependencies.cmake.
packages=(cmake g++ clang libclang-rt-14-dev lld make catch2 libboost-dev libboost-graph-dev libeigen3-dev libtbb-dev
          librange-v3-dev libssl-dev libopenmpi-dev openmpi-bin python3-pip)
if [[ $want_bench == 1 ]]; then
  packages+=(libbenchmark-dev libgloo-dev libdnnl-dev)
fi
if [[ $want_bench == 1 || $want_demo == 1 ]]; then
  packages+=(python3-matplotlib)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} == 0 ]]; then
  echo "weft deps: all ${#packages[@]} Debian packages present"
  exit 0
fi
echo "weft deps: missing ${missing[*]}"
[[ $check_only == 1 ]] && exit 1

if ! command -v apt-get >/dev/null; then
  echo "weft deps: no apt-get here; install the equivalents of: ${missing[*]}" >&2
  exit 1
fi
sudo_cmd=()
if [[ $(id -u) != 0 ]]; then
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    sudo_cmd=(sudo)
  else
    echo "weft deps: not root and no password-less sudo. Please run:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "weft deps: installed ${missing[*]}"
