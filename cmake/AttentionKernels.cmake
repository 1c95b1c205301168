# One line per generated kernel variant:
#
#   attention_kernel(<name> GENERATOR <registered generator> [PARAMS key=value ...] [TARGETS t1 t2 ...])
#
# builds the generator for every target in the list (default: ATTENTION_X86_TARGETS) into one static
# library named <name> whose C function <name>(user_context, ...) dispatches on the CPU's features at
# run time (Halide's multi-target), sharing one Halide runtime. The kernel is appended to the global ATTENTION_KERNELS list
# that the runtime library links.

# Most capable first; the last entry is the baseline every x86-64 CPU since ~2008 runs. Never "host":
# that would bake the build machine's features into the kernels.
set(ATTENTION_X86_TARGETS
    x86-64-linux-sse41-avx-f16c-fma-avx2-avx512-avx512_skylake
    x86-64-linux-sse41-avx-f16c-fma-avx2
    x86-64-linux-sse41
    CACHE STRING "Halide targets of the x86 kernels, best first")

# Sanitizer builds: Halide instruments the generated kernels (asan), and the runtime must carry the
# same feature, so it goes into every target string rather than into FEATURES.
set(ATTENTION_TARGET_SUFFIX "")
if (ATTENTION_SANITIZE)
  set(ATTENTION_TARGET_SUFFIX "-asan")
endif ()
set(runtime_targets ${ATTENTION_X86_TARGETS})
list(TRANSFORM runtime_targets APPEND "${ATTENTION_TARGET_SUFFIX}")
add_halide_runtime(attention_halide_runtime TARGETS ${runtime_targets})

# attention_halide_library(<name> GENERATOR <g> [PARAMS ...] [TARGETS ...]): the library alone, not
# linked into the runtime (test-only kernels use this directly).
function(attention_halide_library NAME)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "GENERATOR" "PARAMS;TARGETS")
  if (NOT ARG_GENERATOR)
    message(FATAL_ERROR "attention_halide_library(${NAME}): GENERATOR is required")
  endif ()
  if (NOT ARG_TARGETS)
    set(ARG_TARGETS ${ATTENTION_X86_TARGETS})
  endif ()
  list(TRANSFORM ARG_TARGETS APPEND "${ATTENTION_TARGET_SUFFIX}")
  # user_context: the runtime passes a per-call context so errors raised on Halide's worker threads
  # still reach the call's Status.
  add_halide_library(${NAME} FROM attention_generators
                     GENERATOR ${ARG_GENERATOR}
                     FUNCTION_NAME ${NAME}
                     PARAMS ${ARG_PARAMS}
                     TARGETS ${ARG_TARGETS}
                     FEATURES user_context
                     USE_RUNTIME attention_halide_runtime)
endfunction()

function(attention_kernel NAME)
  attention_halide_library(${NAME} ${ARGN})
  set_property(GLOBAL APPEND PROPERTY ATTENTION_KERNELS ${NAME})
endfunction()

# Options for the project's own code (never the generator tool): warnings, with ATTENTION_SANITIZE
# AddressSanitizer + UndefinedBehaviorSanitizer, with ATTENTION_FUZZ libFuzzer coverage.
function(attention_project_options TARGET)
  target_compile_options(${TARGET} PRIVATE -Wall -Wextra $<$<BOOL:${ATTENTION_WERROR}>:-Werror>)
  if (ATTENTION_SANITIZE)
    set(flags -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
    target_compile_options(${TARGET} PRIVATE ${flags})
    target_link_options(${TARGET} PRIVATE ${flags})
  endif ()
  if (ATTENTION_FUZZ)  # coverage feedback from the runtime's checks for libFuzzer
    target_compile_options(${TARGET} PRIVATE -fsanitize=fuzzer-no-link)
  endif ()
endfunction()
