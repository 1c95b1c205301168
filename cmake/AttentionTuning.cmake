# Tuned tables: autoschedules/<target>.json, written by tools/attention-tune (docs/tuning.md),
# name per bucket of shapes the tiling parameters that won there. The build turns each table whose
# target it builds into kernel variants for that target alone; the runtime serves a call with the
# variant of its bucket when the CPU runs that target's kernels (kernel_table.cpp).
#
# A table is valid only for the generator sources it was tuned with: its source_hash must equal
# attention_tuning_source_hash() of the sources being built. Otherwise the build warns and builds the
# defaults, and the TunedTablesMatchSources test (cmake/check_tuned_tables.cmake) fails.

# What the SDPA kernels are generated from, relative to the source root.
set(ATTENTION_TUNING_SOURCE_GLOBS
    generators/algorithm/*.h generators/schedule/*.h generators/contract/*.h
    generators/include/attention/generator/*.h generators/generator_inputs.h
    generators/sdpa_generator.cpp)

# SHA-256 over "<sha256>  <path>" lines of those files, sorted by path, each file hashed without
# its comments and whitespace: only an edit to the code stales a table. (The sources hold no
# string literal with "//" or "/*" in it, which this would take for a comment.)
function(attention_tuning_source_hash OUT SOURCE_DIR)
  set(globs "")
  foreach (glob IN LISTS ATTENTION_TUNING_SOURCE_GLOBS)
    list(APPEND globs "${SOURCE_DIR}/${glob}")
  endforeach ()
  file(GLOB files RELATIVE "${SOURCE_DIR}" ${globs})
  list(SORT files)
  set(lines "")
  foreach (file IN LISTS files)
    file(READ "${SOURCE_DIR}/${file}" code)
    string(REGEX REPLACE "/\\*([^*]|\\*+[^*/])*\\*+/" "" code "${code}")
    string(REGEX REPLACE "//[^\n]*" "" code "${code}")
    string(REGEX REPLACE "[ \t\r\n]+" "" code "${code}")
    string(SHA256 file_hash "${code}")
    string(APPEND lines "${file_hash}  ${file}\n")
  endforeach ()
  string(SHA256 hash "${lines}")
  set(${OUT} ${hash} PARENT_SCOPE)
  set(${OUT}_FILES ${files} PARENT_SCOPE)
endfunction()

# Halide target strings name the same target whatever the order of their features.
function(attention_target_key OUT TARGET)
  string(REPLACE "-" ";" parts "${TARGET}")
  list(SORT parts)
  string(JOIN "-" key ${parts})
  set(${OUT} ${key} PARENT_SCOPE)
endfunction()

# attention_tuned_kernels(): the kernels of every current table whose target is in
# ATTENTION_TARGETS, recorded for the runtime's kernel table (runtime/CMakeLists.txt).
function(attention_tuned_kernels)
  attention_tuning_source_hash(current "${PROJECT_SOURCE_DIR}")
  # A changed source changes the hash: configure again so the comparison below stays true.
  list(TRANSFORM current_FILES PREPEND "${PROJECT_SOURCE_DIR}/")
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${current_FILES})
  set(ATTENTION_TUNING_SOURCE_HASH ${current} PARENT_SCOPE)
  if (NOT ATTENTION_TUNED_TABLES)
    return()
  endif ()
  # The tuned kernels are the hand schedule's: in an autoscheduler build they would serve the
  # calls of their buckets in place of the autoscheduled kernels that build exists to run.
  if (ATTENTION_AUTOSCHEDULER)
    message(STATUS "ATTENTION_AUTOSCHEDULER=${ATTENTION_AUTOSCHEDULER}: tuned tables not built")
    return()
  endif ()
  # CONFIGURE_DEPENDS: a table added or removed configures again.
  file(GLOB tables CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/autoschedules/*.json")
  foreach (table IN LISTS tables)
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${table})
    file(READ "${table}" json)
    string(JSON target ERROR_VARIABLE error GET "${json}" target)
    if (error)
      message(WARNING "${table}: not a tuned table (${error}); ignored")
      continue()
    endif ()
    attention_target_key(key "${target}")
    set(built "")
    foreach (candidate IN LISTS ATTENTION_TARGETS)
      attention_target_key(candidate_key "${candidate}")
      if (candidate_key STREQUAL key)
        set(built ${candidate})
      endif ()
    endforeach ()
    if (NOT built)
      continue()  # a table for a target this build does not make
    endif ()
    string(JSON hash GET "${json}" source_hash)
    if (NOT hash STREQUAL current)
      message(WARNING "${table}: tuned for other generator sources (source_hash ${hash}, the "
                      "sources now hash to ${current}); building the default kernels for "
                      "${built}. Run tools/attention-tune again to regenerate it.")
      continue()
    endif ()
    string(JSON count LENGTH "${json}" buckets)
    if (count EQUAL 0)
      continue()
    endif ()
    math(EXPR last "${count} - 1")
    foreach (i RANGE ${last})
      string(JSON bucket GET "${json}" buckets ${i} bucket)
      string(JSON tuned GET "${json}" buckets ${i} tuned)
      if (NOT tuned)
        continue()  # the default won: its calls stay with the default kernel
      endif ()
      string(JSON generator GET "${json}" buckets ${i} generator)
      string(JSON params GET "${json}" buckets ${i} params)
      separate_arguments(param_list UNIX_COMMAND "${params}")
      # The variant must be the one the runtime picks for the bucket's calls.
      set(expected_tiling prefill)
      if (bucket MATCHES "^decode")
        set(expected_tiling decode)
      endif ()
      if (NOT "query_tiling=${expected_tiling}" IN_LIST param_list)
        message(WARNING "${table}: bucket ${bucket} needs query_tiling=${expected_tiling}, has "
                        "'${params}'; ignored")
        continue()
      endif ()
      if (generator STREQUAL "sdpa")
        set(family plain)
      elseif (generator STREQUAL "masked_sdpa")
        set(family masked)
      else ()
        message(WARNING "${table}: bucket ${bucket}: generator ${generator} is not tunable; ignored")
        continue()
      endif ()
      string(MD5 id "${built};${generator};${params}")
      string(SUBSTRING "${id}" 0 10 id)
      set(name "${generator}_f32_tuned_${id}")
      get_property(made TARGET attention_kernel_list PROPERTY ATTENTION_TUNED_MADE_${name})
      if (NOT made)
        attention_kernel(${name} GENERATOR ${generator} PARAMS ${param_list} TARGETS ${built})
        set_property(TARGET attention_kernel_list PROPERTY ATTENTION_TUNED_MADE_${name} TRUE)
        set_property(TARGET attention_kernel_list APPEND_STRING PROPERTY ATTENTION_TUNED_HEADERS
                     "#include \"${name}.h\"\n")
      endif ()
      set_property(TARGET attention_kernel_list APPEND_STRING PROPERTY ATTENTION_TUNED_ROWS_${family}
                   "    {{${name}, \"${name}\"}, \"${bucket}\", \"${built}\"},\n")
    endforeach ()
  endforeach ()
endfunction()
