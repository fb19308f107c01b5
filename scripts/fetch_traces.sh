#!/usr/bin/env bash
# Fetches the public LLM-serving traces and profiles that are too large (or not needed) to ship in
# data/, checking each download against a checksum pinned below. See data/README.md.
#
#   scripts/fetch_traces.sh --list                 what can be fetched, with licence and size
#   scripts/fetch_traces.sh NAME... | all          fetch into data/fetched/NAME.csv (or --dir DIR)
#   scripts/fetch_traces.sh --trust-first NAME     fetch an entry with no pinned checksum (see below)
#
# Every entry names its checksum: "sha256:<hex>" (checked with sha256sum) or "gitblob:<hex>" (the
# git blob id of the file in the named commit of its repository, for files too large for us to have
# downloaded when this script was written; checked with `git hash-object`, or sha1sum over git's
# "blob <size>\0" header). An entry marked "unpinned" has no checksum we could verify: it is fetched
# only with --trust-first, which records the sha256 it got in DIR/SHA256SUMS.local and checks every
# later download against that record. A download whose checksum differs is deleted, and the script
# says so and exits with status 2. Needs curl. Re-running skips files that are present and verify.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
dir="$here/../data/fetched"
trust_first=0
list=0
names=()

# name | url | checksum | licence | what
manifest() {
  if [[ -n "${WEFT_FETCH_MANIFEST:-}" ]]; then  # tests substitute their own entries
    cat "$WEFT_FETCH_MANIFEST"
    return
  fi
  cat <<'EOF'
azure-2023-code|https://raw.githubusercontent.com/Azure/AzurePublicDataset/b469a113cedca53ddc3bdea71a143dc4b7d8700c/data/AzureLLMInferenceTrace_code.csv|sha256:54e9a6d2a4bd06ba1e060304b900abbc74cbea53de96506e60fe5bb4f2277fb6|CC-BY 4.0 (Patel et al., Splitwise, ISCA 2024)|Azure LLM inference trace 2023, code service (0.3 MB; the conversation service ships in data/)
azure-2024-code-1week|https://azurepublicdatasettraces.blob.core.windows.net/azurellminfererencetrace/AzureLLMInferenceTrace_code_1week.csv|unpinned|CC-BY 4.0 (Stojkovic et al., DynamoLLM, HPCA 2025)|Azure LLM inference trace 2024, code service, one week
azure-2024-conv-1week|https://azurepublicdatasettraces.blob.core.windows.net/azurellminfererencetrace/AzureLLMInferenceTrace_conv_1week.csv|unpinned|CC-BY 4.0 (Stojkovic et al., DynamoLLM, HPCA 2025)|Azure LLM inference trace 2024, conversation service, one week
burstgpt-1|https://raw.githubusercontent.com/HPMLL/BurstGPT/e92f533b6c85ea7f4164fb3d97d1aa2c3edacbc8/data/BurstGPT_1.csv|gitblob:f95dd2c84454b067fdd0973858c55ecfe31bdad7|CC-BY 4.0 (Wang et al., BurstGPT, KDD 2025)|BurstGPT, first two months (1.43M rows, ChatGPT and GPT-4)
sharegpt-8k-lengths|https://raw.githubusercontent.com/microsoft/sarathi-serve/72339db5b120614033b317880ad3a05a5e4c9415/data/processed_traces/sharegpt_8k_filtered_stats_llama2_tokenizer.csv|sha256:6d6c296302a853e2669a674a96f269283e60c57e60363bd450588a1066919f9f|Apache-2.0 (Agrawal et al., Sarathi-Serve, OSDI 2024)|(prompt, output) lengths of ShareGPT4 conversations (30,731 pairs, <= 8k tokens): Sarathi-Serve's capacity workload
vidur-a100-llama3-8b-mlp|https://raw.githubusercontent.com/microsoft/vidur/7d47513363ec447a741ac5e47241580b47724fbf/data/profiling/compute/a100/meta-llama/Meta-Llama-3-8B/mlp.csv|sha256:98c26488298e324e89db7349e213f75c856ae83dc6b17548a68636d2cb5efff0|MIT (Agrawal et al., Vidur, MLSys 2024)|Vidur operator profile, Llama-3-8B on A100 (same layer shape as Mistral-7B)
vidur-a100-llama3-70b-mlp|https://raw.githubusercontent.com/microsoft/vidur/7d47513363ec447a741ac5e47241580b47724fbf/data/profiling/compute/a100/meta-llama/Meta-Llama-3-70B/mlp.csv|sha256:6929c6f4afae67f7d91a7938ebdb350a47923b077a1b1c2a4e1911f5ec9e601f|MIT (Agrawal et al., Vidur, MLSys 2024)|Vidur operator profile, Llama-3-70B on A100
EOF
}

usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --list) list=1 ;;
    --dir) dir=${2:?--dir needs a folder}; shift ;;
    --trust-first) trust_first=1 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "fetch_traces.sh: unknown option '$1'" >&2; usage >&2; exit 1 ;;
    *) names+=("$1") ;;
  esac
  shift
done

if [[ $list -eq 1 || ${#names[@]} -eq 0 ]]; then
  manifest | while IFS='|' read -r name url sum licence what; do
    printf '%-26s %s\n%-26s licence: %s; checksum: %s\n' "$name" "$what" "" "$licence" "${sum%%:*}"
  done
  [[ $list -eq 1 ]] && exit 0
  echo; echo "usage: scripts/fetch_traces.sh NAME... | all   (--dir DIR, --trust-first)"; exit 1
fi

command -v curl >/dev/null || { echo "fetch_traces.sh: curl is not installed (apt-get install curl)" >&2; exit 1; }
mkdir -p "$dir"

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }
gitblob_of() {
  if command -v git >/dev/null; then
    git hash-object --no-filters "$1"
  else
    { printf 'blob %s\0' "$(stat -c %s "$1")"; cat "$1"; } | sha1sum | cut -d' ' -f1
  fi
}

# verify FILE CHECKSUM NAME -> 0 when it matches (unpinned: the local record, if any)
verify() {
  local file=$1 sum=$2 name=$3 got want
  case "$sum" in
    sha256:*) got=$(sha256_of "$file"); want=${sum#sha256:} ;;
    gitblob:*) got=$(gitblob_of "$file"); want=${sum#gitblob:} ;;
    unpinned)
      want=$(awk -v n="$name" '$2 == n {print $1}' "$dir/SHA256SUMS.local" 2>/dev/null || true)
      got=$(sha256_of "$file")
      if [[ -z "$want" ]]; then
        [[ $trust_first -eq 1 ]] || return 3
        echo "$got $name" >>"$dir/SHA256SUMS.local"
        echo "  recorded sha256 $got for $name in $dir/SHA256SUMS.local (trusted on first download)"
        return 0
      fi ;;
    *) echo "fetch_traces.sh: bad checksum field '$sum' for $name" >&2; return 4 ;;
  esac
  [[ "$got" == "$want" ]] && return 0
  echo "  checksum mismatch for $name: expected $want, got $got" >&2
  return 1
}

all_names=$(manifest | cut -d'|' -f1)
if [[ "${names[*]}" == "all" ]]; then
  mapfile -t names <<<"$all_names"
fi
status=0
for name in "${names[@]}"; do
  line=$(manifest | awk -F'|' -v n="$name" '$1 == n')
  if [[ -z "$line" ]]; then
    echo "fetch_traces.sh: no entry named '$name' (known: $(echo $all_names))" >&2
    status=1
    continue
  fi
  IFS='|' read -r _ url sum _ _ <<<"$line"
  file="$dir/$name.${url##*.}"  # named after the entry: two sources may share a basename
  if [[ "$sum" == unpinned && $trust_first -eq 0 ]] && ! grep -q " $name\$" "$dir/SHA256SUMS.local" 2>/dev/null; then
    echo "$name: no checksum is pinned for this file; rerun with --trust-first to fetch it and record its sha256" >&2
    status=1
    continue
  fi
  if [[ -f "$file" ]] && verify "$file" "$sum" "$name" 2>/dev/null; then
    echo "$name: $file present and verified"
    continue
  fi
  echo "$name: fetching $url"
  part="$file.part"
  rm -f "$part"
  if ! curl -fsSL --retry 3 --connect-timeout 20 -o "$part" "$url"; then
    rm -f "$part"
    echo "$name: download failed (no network, or the URL moved); nothing was kept" >&2
    status=1
    continue
  fi
  if verify "$part" "$sum" "$name"; then
    mv -f "$part" "$file"
    echo "$name: $file verified"
  else
    rm -f "$part" "$file"
    echo "$name: the download does not match its checksum, so it was deleted (nothing kept at $file)" >&2
    status=2
  fi
done
exit $status
