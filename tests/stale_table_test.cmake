# cmake -DSOURCE_DIR=<source root> -DWORK_DIR=<scratch> -P tests/stale_table_test.cmake: the
# stale-table check (cmake/check_tuned_tables.cmake) must fail once the algorithm changes after a
# table was tuned, and must not once only comments or whitespace change. Copies the generator
# sources, writes a table with their current hash (the check passes), edits comments and
# whitespace in the copy (it still passes), then edits the algorithm (it must fail, naming the
# table).
file(REMOVE_RECURSE "${WORK_DIR}")
file(COPY "${SOURCE_DIR}/generators" "${SOURCE_DIR}/cmake" DESTINATION "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}/autoschedules")
include("${SOURCE_DIR}/cmake/AttentionTuning.cmake")
attention_tuning_source_hash(hash "${WORK_DIR}")
file(WRITE "${WORK_DIR}/autoschedules/x86-64-linux-test.json"
     "{\"target\": \"x86-64-linux-test\", \"source_hash\": \"${hash}\", \"buckets\": []}\n")

function(run_check OUT_RESULT OUT_TEXT)
  execute_process(COMMAND "${CMAKE_COMMAND}" -DSOURCE_DIR=${WORK_DIR}
                          -P "${WORK_DIR}/cmake/check_tuned_tables.cmake"
                  RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(${OUT_RESULT} ${result} PARENT_SCOPE)
  set(${OUT_TEXT} "${out}${err}" PARENT_SCOPE)
endfunction()

run_check(result text)
if (NOT result EQUAL 0)
  message(FATAL_ERROR "a table tuned for the current sources was reported stale:\n${text}")
endif ()
file(APPEND "${WORK_DIR}/generators/algorithm/sdpa.h" "\n// a comment\n/* and another\n */\n")
file(READ "${WORK_DIR}/generators/schedule/cpu.h" schedule)
string(REPLACE "\n" "  \n\n" schedule "${schedule}")
file(WRITE "${WORK_DIR}/generators/schedule/cpu.h" "${schedule}")
run_check(result text)
if (NOT result EQUAL 0)
  message(FATAL_ERROR "only comments and whitespace changed, but the table was reported stale:\n"
                      "${text}")
endif ()
file(APPEND "${WORK_DIR}/generators/algorithm/sdpa.h" "inline int an_edit_to_the_algorithm() { return 1; }\n")
run_check(result text)
if (result EQUAL 0 OR NOT text MATCHES "x86-64-linux-test.json")
  message(FATAL_ERROR "the algorithm changed but the check passed the table:\n${text}")
endif ()
message(STATUS "stale table detected as expected")
