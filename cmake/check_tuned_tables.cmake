# cmake -DSOURCE_DIR=<source root> -P cmake/check_tuned_tables.cmake: fails naming every tuned table
# (autoschedules/*.json) whose source_hash is not that of the generator sources now, i.e. a table
# the build would ignore because the algorithm or schedule changed since it was tuned. The test
# TunedTablesMatchSources runs it.
include(${CMAKE_CURRENT_LIST_DIR}/AttentionTuning.cmake)
attention_tuning_source_hash(current "${SOURCE_DIR}")
file(GLOB tables "${SOURCE_DIR}/autoschedules/*.json")
set(stale "")
foreach (table IN LISTS tables)
  file(READ "${table}" json)
  string(JSON hash ERROR_VARIABLE error GET "${json}" source_hash)
  if (error OR NOT hash STREQUAL current)
    list(APPEND stale "${table} (source_hash '${hash}')")
  endif ()
endforeach ()
list(LENGTH tables count)
if (stale)
  string(JOIN "\n  " stale_lines ${stale})
  message(FATAL_ERROR "tuned tables stale: the generator sources now hash to ${current}, but\n"
                      "  ${stale_lines}\nRegenerate them with tools/attention-tune (docs/tuning.md"
                      "), or delete them to build the defaults.")
endif ()
message(STATUS "${count} tuned table(s) match the generator sources (${current})")
