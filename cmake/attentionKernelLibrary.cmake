# attention_add_kernel_library(<name> KERNELS <kernel>... TARGETS <halide target>...
#                              [SCHEDULE <key=value>...])
#
# Generates, at the application's build time, the attention kernels KERNELS (attention-gen --list:
# sdpa, masked_sdpa, mha, sdpa_f16kv, sdpa_bf16kv) for the Halide TARGETS (best first; one
# architecture, that of the application's toolchain) and makes <name> a target to link beside attention::attention: the
# library's calls then run these kernels (attention/kernel_library.h). SCHEDULE takes the tiling
# parameters of the sdpa, masked_sdpa and half-cache kernels (key_chunk=64, ...) and
# autoscheduler=<name> for the sdpa kernels. The kernels live in namespace <name>; <name>.h declares
# <name>::register_kernels(), which reports whether this CPU can use them (they are registered
# before the first call anyway).
#
# The work is done by attention-gen (ATTENTION_GEN_EXECUTABLE), which runs the installed generator
# executable: both make byte-identical kernels. Cross-compiling, the package for the target has no
# tools that run here: set ATTENTION_GEN_EXECUTABLE to bin/attention-gen of an install of attention
# built for this build machine.
include_guard(GLOBAL)

# Stops unless every Halide target is for the processor this project compiles for: kernels of
# another architecture would only fail at link time. "host" (this build machine's CPU) is refused
# when cross-compiling.
function(_attention_check_target_processor where)
  if (CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64|ARM64)$")
    set(platform "arm-64-")
  elseif (CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
    set(platform "x86-64-")
  else ()
    set(platform "")
  endif ()
  foreach (target IN LISTS ARGN)
    if (target MATCHES "^host(-|$)" AND NOT CMAKE_CROSSCOMPILING)
      continue ()
    endif ()
    if (platform AND NOT target MATCHES "^${platform}")
      message(FATAL_ERROR "${where}: target '${target}' is not for ${CMAKE_SYSTEM_PROCESSOR}, the "
                          "processor this project compiles for (expected ${platform}<os>-...)")
    endif ()
  endforeach ()
endfunction()

function(attention_add_kernel_library NAME)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "" "KERNELS;TARGETS;SCHEDULE")
  set(where "attention_add_kernel_library(${NAME})")
  if (ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "${where}: unknown argument '${ARG_UNPARSED_ARGUMENTS}' "
                        "(expected KERNELS, TARGETS, SCHEDULE)")
  endif ()
  if (NOT ARG_KERNELS OR NOT ARG_TARGETS)
    message(FATAL_ERROR "${where}: KERNELS and TARGETS are required")
  endif ()
  if (TARGET ${NAME})
    message(FATAL_ERROR "${where}: a target named ${NAME} exists already")
  endif ()
  if (NOT ATTENTION_GEN_EXECUTABLE OR NOT EXISTS "${ATTENTION_GEN_EXECUTABLE}")
    if (CMAKE_CROSSCOMPILING)
      message(FATAL_ERROR
              "${where}: cross-compiling for ${CMAKE_SYSTEM_PROCESSOR}, and the attention package "
              "(${attention_SYSTEM_PROCESSOR}) has no generator for this build machine "
              "(${CMAKE_HOST_SYSTEM_PROCESSOR}): set ATTENTION_GEN_EXECUTABLE to bin/attention-gen "
              "of an attention install built for ${CMAKE_HOST_SYSTEM_PROCESSOR}")
    endif ()
    message(FATAL_ERROR "${where}: attention-gen not found (ATTENTION_GEN_EXECUTABLE="
                        "'${ATTENTION_GEN_EXECUTABLE}')")
  endif ()
  _attention_check_target_processor("${where}" ${ARG_TARGETS})

  set(dir "${CMAKE_CURRENT_BINARY_DIR}/${NAME}")
  string(JOIN "," kernels ${ARG_KERNELS})
  string(JOIN "," targets ${ARG_TARGETS})
  set(command "${ATTENTION_GEN_EXECUTABLE}" --name ${NAME} --kernels ${kernels}
              --targets ${targets} --out "${dir}")
  if (ARG_SCHEDULE)
    string(JOIN "," schedule ${ARG_SCHEDULE})
    list(APPEND command --schedule ${schedule})
  endif ()
  # Every argument checked now, at configure time (unknown kernel, target, parameter), and the
  # file list for the build rule.
  execute_process(COMMAND ${command} --dry-run OUTPUT_VARIABLE files ERROR_VARIABLE error
                  RESULT_VARIABLE result OUTPUT_STRIP_TRAILING_WHITESPACE
                  ERROR_STRIP_TRAILING_WHITESPACE)
  if (NOT result EQUAL 0)
    string(REGEX REPLACE "^attention-gen: " "" error "${error}")
    message(FATAL_ERROR "${where}: ${error}")
  endif ()
  string(REPLACE "\n" ";" files "${files}")
  list(TRANSFORM files PREPEND "${dir}/")
  set(archives ${files})
  list(FILTER archives INCLUDE REGEX "\\.a$")
  add_custom_command(OUTPUT ${files}
                     COMMAND ${command} --quiet
                     DEPENDS "${ATTENTION_GEN_EXECUTABLE}"
                     COMMENT "attention-gen: kernel library ${NAME} (${kernels} for ${targets})"
                     VERBATIM)
  # An object library: its registration object is always linked (never dropped from an archive),
  # so the kernels register before the first call.
  add_library(${NAME} OBJECT "${dir}/${NAME}_registration.cpp")
  target_compile_features(${NAME} PUBLIC cxx_std_17)
  target_include_directories(${NAME} PUBLIC "$<BUILD_INTERFACE:${dir}>")
  target_link_libraries(${NAME} PUBLIC ${archives} attention::attention)
  set_target_properties(${NAME} PROPERTIES ATTENTION_KERNELS "${ARG_KERNELS}"
                                           ATTENTION_TARGETS "${ARG_TARGETS}"
                                           ATTENTION_KERNEL_DIR "${dir}")
endfunction()
