#!/usr/bin/env bash
# Runs the README's "Adding weft to your project" blocks verbatim, so the README and the tests cannot
# drift: for each way named on the command line (find_package, add_subdirectory, FetchContent, Conan),
# the blocks marked `<!-- readme-test <way> <file|commands> -->` are extracted; the files go into an
# empty my_engine/ beside the quick start's code as main.cpp, and the commands run with bash -e in an
# empty directory. Then the program must print the quick start's p99 line.
#
# The only differences from a user's machine: HOME is that empty directory, git fetches
# https://github.com/weft-ml/weft.git from a snapshot of this checkout (its tracked and untracked,
# not ignored files, committed and tagged v<version>; git's url.<base>.insteadOf), and Conan has a
# default profile with the system's packages as [platform_requires] and no remote.
#
# Usage: tests/package/readme.sh <way>...     (work directory: build/package/readme)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
readme="$root/README.md"
work="$root/build/package/readme"
[[ $# -gt 0 ]] || { echo "usage: tests/package/readme.sh find_package|add_subdirectory|FetchContent|Conan..." >&2; exit 2; }

# The fenced block that follows the marker line; fails when the README has none.
block() {
  local way=$1 kind=$2 text
  text=$(awk -v marker="<!-- readme-test $way $kind -->" '
    $0 == marker { armed = 1; next }
    armed && /^```/ { if (inside) exit; inside = 1; next }
    inside { print }' "$readme")
  if [[ -z $text ]]; then
    echo "readme.sh: README.md has no block marked '<!-- readme-test $way $kind -->'" >&2
    exit 1
  fi
  printf '%s\n' "$text"
}
quick_start() {
  awk '/^## Quick start/ { armed = 1 } armed && /^```cpp/ { inside = 1; next }
       inside && /^```/ { exit } inside { print }' "$readme"
}

version=$(sed -n 's/^#define WEFT_VERSION_STRING "\(.*\)"/\1/p' "$root/include/weft/core/config.hpp")
mkdir -p "$work"

# A snapshot of the checkout as a git repository with the release tag the README's FetchContent asks for.
origin="$work/origin"
rm -rf "$origin"
mkdir -p "$origin"
(cd "$root" && git ls-files -z --cached --others --exclude-standard | xargs -0 -r tar -cf - --ignore-failed-read) |
  tar -xf - -C "$origin"
[[ -f $origin/CMakeLists.txt ]] || { echo "readme.sh: could not snapshot $root (not a git checkout?)" >&2; exit 1; }
git -C "$origin" init -q
git -C "$origin" add -A
git -C "$origin" -c user.name=weft-test -c user.email=test@weft.invalid commit -q -m snapshot
git -C "$origin" tag "v$version"
gitconfig="$work/gitconfig"
cat > "$gitconfig" <<EOF
[url "file://$origin"]
	insteadOf = https://github.com/weft-ml/weft.git
[protocol "file"]
	allow = always
[advice]
	detachedHead = false
EOF

for way in "$@"; do
  dir="$work/$way"
  rm -rf "$dir"
  mkdir -p "$dir/home" "$dir/my_engine"
  quick_start > "$dir/my_engine/main.cpp"
  if [[ $way == Conan ]]; then
    block find_package CMakeLists.txt > "$dir/my_engine/CMakeLists.txt"
    block Conan conanfile.txt > "$dir/my_engine/conanfile.txt"
  else
    block "$way" CMakeLists.txt > "$dir/my_engine/CMakeLists.txt"
  fi
  block "$way" commands > "$dir/commands.sh"
  echo "readme: $way ($(grep -c . "$dir/commands.sh") commands from README.md)"
  if ! (cd "$dir" && HOME="$dir/home" GIT_CONFIG_GLOBAL="$gitconfig" bash -e -x commands.sh) > "$dir/log" 2>&1; then
    cat "$dir/log"
    echo "FAILED: README way '$way' (commands in $dir/commands.sh, log above)" >&2
    exit 1
  fi
  if ! grep -q '^p50 .* ms, p99 .* ms$' "$dir/log"; then
    cat "$dir/log"
    echo "FAILED: README way '$way' built, but the program did not print the quick start's p99 line" >&2
    exit 1
  fi
done
