# The data weft's examples, tests and benchmarks read (the Azure LLM trace, measured GPU operator
# profiles; see data/README.md) lives in data/ of this source tree, so it is found from any clone.
#   weft_use_data(<target>)  gives the target the compile definition WEFT_DATA_DIR="<that folder>".
# Larger public traces are fetched into data/fetched/ by scripts/fetch_traces.sh.
set(WEFT_DATA_DIR "${PROJECT_SOURCE_DIR}/data" CACHE PATH "Folder with weft's data (traces, GPU profiles)")

function(weft_use_data target)
  target_compile_definitions(${target} PRIVATE WEFT_DATA_DIR="${WEFT_DATA_DIR}")
endfunction()
