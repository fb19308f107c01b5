#!/usr/bin/env bash
# scripts/fetch_traces.sh against local file:// entries: a good checksum keeps the file, a wrong one
# deletes the download and exits 2 saying so, an unpinned entry needs --trust-first.
set -euo pipefail
script=${1:?usage: fetch_traces_test.sh <path to scripts/fetch_traces.sh>}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf 'hello trace\n' >"$work/good.csv"
printf 'other\n' >"$work/bad.csv"
good=$(sha256sum "$work/good.csv" | cut -d' ' -f1)
blob=$(git hash-object --no-filters "$work/good.csv" 2>/dev/null || echo skip)
cat >"$work/manifest" <<M
good|file://$work/good.csv|sha256:$good|test|a file whose checksum matches
bad|file://$work/bad.csv|sha256:$good|test|a file whose checksum does not
blob|file://$work/good.csv|gitblob:$blob|test|checked by git blob id
free|file://$work/good.csv|unpinned|test|no pinned checksum
M
export WEFT_FETCH_MANIFEST="$work/manifest"
out="$work/out"
fail() { echo "FAIL: $*" >&2; exit 1; }

"$script" --dir "$out" good >"$work/log" 2>&1 || fail "good entry: $(cat "$work/log")"
[[ -f "$out/good.csv" ]] || fail "good entry not kept"
"$script" --dir "$out" good | grep -q "present and verified" || fail "second run should verify the file in place"

set +e
"$script" --dir "$out" bad >"$work/log" 2>&1
rc=$?
set -e
[[ $rc -eq 2 ]] || fail "wrong checksum should exit 2, got $rc"
grep -q "checksum mismatch" "$work/log" || fail "no mismatch message: $(cat "$work/log")"
grep -q "deleted" "$work/log" || fail "does not say the file was deleted: $(cat "$work/log")"
[[ ! -e "$out/bad.csv" && ! -e "$out/bad.csv.part" ]] || fail "the mismatching download was kept"

if [[ "$blob" != skip ]]; then
  rm -f "$out/good.csv"
  "$script" --dir "$out" blob >/dev/null 2>&1 || fail "gitblob entry did not verify"
fi

set +e
"$script" --dir "$out" free >"$work/log" 2>&1
rc=$?
set -e
[[ $rc -ne 0 ]] || fail "unpinned entry fetched without --trust-first"
grep -q -- "--trust-first" "$work/log" || fail "no hint about --trust-first"
"$script" --dir "$out" --trust-first free >/dev/null 2>&1 || fail "--trust-first fetch failed"
grep -q " free$" "$out/SHA256SUMS.local" || fail "trusted sha256 not recorded"

set +e
"$script" --dir "$out" nosuch >"$work/log" 2>&1
rc=$?
set -e
[[ $rc -eq 1 ]] && grep -q "no entry named" "$work/log" || fail "unknown name not reported"
echo "fetch_traces.sh: all checks passed"
