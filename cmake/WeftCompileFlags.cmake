# weft_write_compile_flags(<dir>): writes <dir>/<module>.flags for every available module (and
# weft.flags for the umbrella target): the -I and -D flags a translation unit that links weft::<module>
# gets, third-party packages included, one per ';'. tests/repo/compile_time.sh reads them to time
# `-fsyntax-only` of each umbrella header (repo.compile_time, and the table bench/run_all.sh prints).
function(weft_write_compile_flags dir)
  foreach(mod IN LISTS WEFT_AVAILABLE_MODULES ITEMS weft)
    set(tgt weft_${mod})
    set(inc "$<TARGET_PROPERTY:${tgt},INTERFACE_INCLUDE_DIRECTORIES>")
    set(def "$<TARGET_PROPERTY:${tgt},INTERFACE_COMPILE_DEFINITIONS>")
    file(GENERATE OUTPUT "${dir}/${mod}.flags"
         CONTENT "$<$<BOOL:${inc}>:-I$<JOIN:${inc},;-I>>;$<$<BOOL:${def}>:-D$<JOIN:${def},;-D>>\n")
  endforeach()
endfunction()
