# One line per generated kernel variant:
#
#   attention_kernel(<name> GENERATOR <registered generator> [PARAMS key=value ...] [TARGETS t1 t2 ...]
#                    [ASSEMBLY <variable>] [AUTOSCHEDULER Halide::<name>])
#
# builds the generator for every target in the list (default: ATTENTION_TARGETS, the x86 or ARM list
# of the architecture being built for) into one static library named <name> whose function
# attention::kernels::<name>(user_context, ...) dispatches on the CPU's features at run time
# (Halide's multi-target), sharing one Halide runtime. The kernel is appended to the ATTENTION_KERNELS property of the target
# attention_kernel_list, which the runtime library links and the package merges, and its generator,
# parameters and targets are recorded there (ATTENTION_KERNEL_BUILDS) for the runtime's kernel table
# (runtime/src/kernels/kernel_table.h). ASSEMBLY names a variable that receives the path of the
# kernel's assembly listing (Halide's ASSEMBLY output, emitted by the same generator run).

# Most capable first; the last entry is the baseline every x86-64 CPU since ~2008 runs. Never "host":
# that would bake the build machine's features into the kernels.
set(ATTENTION_X86_TARGETS
    x86-64-linux-sse41-avx-f16c-fma-avx2-avx512-avx512_skylake
    x86-64-linux-sse41-avx-f16c-fma-avx2
    x86-64-linux-sse41
    CACHE STRING "Halide targets of the x86 kernels, best first")
# The native bf16 prefill (generators/CMakeLists.txt): x86 CPUs with AVX-512 BF16 (vdpbf16ps).
# Halide names that ISA avx512_zen4 (AMD Zen 4 and 5); Intel Sapphire Rapids and later have every
# instruction it uses. One target: the runtime calls the kernel only on a CPU that has them
# (detail::cpu_runs_bf16_prefill) and widens to fp32 elsewhere.
set(ATTENTION_X86_BF16_TARGET
    x86-64-linux-sse41-avx-f16c-fma-avx2-avx512-avx512_skylake-avx512_cannonlake-avx512_zen4
    CACHE STRING "Halide target of the native bf16 prefill kernel (x86)")
# AMX (tdpbf16ps) for the bf16 prefill on Intel Sapphire Rapids and later: the BF16 target plus
# Halide's avx512_sapphirerapids. A process must ask Linux for the tile state before the first
# tile instruction (arch_prctl ARCH_REQ_XCOMP_PERM); Halide 21 does not.
set(ATTENTION_X86_AMX_TARGET ${ATTENTION_X86_BF16_TARGET}-avx512_sapphirerapids
    CACHE STRING "Halide target of the AMX bf16 prefill kernel (x86)")
# ARM: the NEON baseline. arm_dot_prod and arm_fp16 give the fp32 kernels nothing (Halide 21
# emits the same code with them), so no variants.
set(ATTENTION_ARM_TARGETS arm-64-linux CACHE STRING "Halide targets of the aarch64 kernels, best first")
if (CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64|ARM64)$")
  set(ATTENTION_ARCH arm)
  set(ATTENTION_TARGETS ${ATTENTION_ARM_TARGETS})
else ()
  set(ATTENTION_ARCH x86)
  set(ATTENTION_TARGETS ${ATTENTION_X86_TARGETS})
endif ()

# GPU kernels (generators/schedule/cuda.h), in x86 builds: CUDA for compute capability 8.0 and newer
# (Hopper runs the sm_80 PTX through the driver's JIT: Halide 21 knows no cuda_capability_90), and
# OpenCL, which CI runs on PoCL. Their host code is the SSE4.1 baseline. Halide emits the device
# code itself: building needs no CUDA toolkit or OpenCL SDK, and the runtime loads libcuda.so.1 or
# libOpenCL.so.1 only when a call asks for that backend.
set(ATTENTION_CUDA_TARGET x86-64-linux-sse41-cuda-cuda_capability_80
    CACHE STRING "Halide target of the CUDA kernels")
set(ATTENTION_OPENCL_TARGET x86-64-linux-sse41-opencl CACHE STRING "Halide target of the OpenCL kernels")
# Not in sanitizer builds: Halide's asan feature is for CPU code, and the OpenCL/CUDA drivers are
# not instrumented; the regular build runs the GPU suites.
set(ATTENTION_GPU ON)
if (NOT ATTENTION_ARCH STREQUAL "x86" OR ATTENTION_SANITIZE)
  set(ATTENTION_GPU OFF)
endif ()

# -DATTENTION_KERNELS_FROM=<a native x86 build of these sources, built>: link that build's kernels
# and Halide runtime instead of generating them again. The sanitizer job (scripts/test_sanitizers.sh)
# instruments the runtime and the tests this way; the kernels are the ones the x86 suite tests
# (uninstrumented: Halide's own bounds checks still guard every buffer they touch), and CI
# generates each x86 kernel once.
set(ATTENTION_KERNELS_FROM "" CACHE PATH "Take the generated kernels from this x86 build directory")
if (ATTENTION_KERNELS_FROM)
  if (NOT ATTENTION_ARCH STREQUAL "x86" OR CMAKE_CROSSCOMPILING)
    message(FATAL_ERROR "ATTENTION_KERNELS_FROM: native x86 builds only")
  endif ()
  if (NOT EXISTS "${ATTENTION_KERNELS_FROM}/libattention_halide_runtime.a")
    message(FATAL_ERROR "ATTENTION_KERNELS_FROM=${ATTENTION_KERNELS_FROM}: no built x86 build "
                        "there (libattention_halide_runtime.a missing); build it first "
                        "(scripts/build.sh)")
  endif ()
  # Its kernels are built for its targets, and the kernel table records those.
  load_cache("${ATTENTION_KERNELS_FROM}" READ_WITH_PREFIX from_ ATTENTION_X86_TARGETS
             ATTENTION_X86_BF16_TARGET ATTENTION_X86_AMX_TARGET)
  foreach (targets IN ITEMS ATTENTION_X86_TARGETS ATTENTION_X86_BF16_TARGET ATTENTION_X86_AMX_TARGET)
    set(${targets} "${from_${targets}}" CACHE STRING "As in ATTENTION_KERNELS_FROM" FORCE)
  endforeach ()
  set(ATTENTION_TARGETS ${ATTENTION_X86_TARGETS})
endif ()

# Sanitizer builds: Halide instruments the generated kernels (asan), and the runtime must carry the
# same feature, so it goes into every target string rather than into FEATURES.
set(ATTENTION_TARGET_SUFFIX "")
if (ATTENTION_SANITIZE AND NOT ATTENTION_KERNELS_FROM)
  set(ATTENTION_TARGET_SUFFIX "-asan")
endif ()
set(runtime_targets ${ATTENTION_TARGETS})
if (ATTENTION_GPU)
  # One runtime for every kernel: the CPU targets' common ISA plus the CUDA and OpenCL modules.
  list(APPEND runtime_targets ${ATTENTION_CUDA_TARGET} ${ATTENTION_OPENCL_TARGET})
endif ()
list(TRANSFORM runtime_targets APPEND "${ATTENTION_TARGET_SUFFIX}")
if (ATTENTION_KERNELS_FROM)
  find_package(Threads REQUIRED)
  add_library(attention_halide_runtime STATIC IMPORTED GLOBAL)
  set_target_properties(attention_halide_runtime PROPERTIES
                        IMPORTED_LOCATION "${ATTENTION_KERNELS_FROM}/libattention_halide_runtime.a")
  target_link_libraries(attention_halide_runtime INTERFACE Halide::Runtime Threads::Threads
                                                           ${CMAKE_DL_LIBS})
else ()
  add_halide_runtime(attention_halide_runtime TARGETS ${runtime_targets})
endif ()

# attention_halide_library(<name> GENERATOR <g> [PARAMS ...] [TARGETS ...] [ASSEMBLY <var>]
#                          [FROM <generator executable>]): the library alone, not linked into the
# runtime (test-only kernels and the benchmark's FMA probe use this directly). FROM: default
# attention_generators.
# Halide's autoscheduler plugins ship in the wheel beside libHalide, but its CMake package names no
# targets for them: imported here as Halide::<name> for add_halide_library's AUTOSCHEDULER.
get_target_property(halide_library Halide::Halide LOCATION)
get_filename_component(halide_library_dir "${halide_library}" DIRECTORY)
foreach (scheduler IN ITEMS Mullapudi2016 Li2018 Adams2019 Anderson2021)
  string(TOLOWER ${scheduler} plugin)
  set(plugin "${halide_library_dir}/libautoschedule_${plugin}.so")
  if (NOT TARGET Halide::${scheduler} AND EXISTS "${plugin}")
    add_library(Halide::${scheduler} MODULE IMPORTED GLOBAL)
    set_target_properties(Halide::${scheduler} PROPERTIES IMPORTED_LOCATION "${plugin}")
  endif ()
endforeach ()

# -DATTENTION_AUTOSCHEDULER=<name>: the CPU SDPA kernels (sdpa_f32_prefill, sdpa_f32_decode) take
# that autoscheduler's schedule instead of the hand schedule, to compare them or to check they pass
# the SDPA tests (docs/tuning.md). Adams2019 runs greedy (beam size 1): its beam search takes
# ~10 minutes per kernel on 2 cores.
set(ATTENTION_AUTOSCHEDULER "" CACHE STRING
    "Schedule the CPU SDPA kernels with this Halide autoscheduler (Mullapudi2016, Li2018, Adams2019)")
# The autoschedulers plan for this many cores (the tuner passes the same, os.cpu_count()).
cmake_host_system_information(RESULT ATTENTION_HOST_CORES QUERY NUMBER_OF_LOGICAL_CORES)
set(ATTENTION_SDPA_SCHEDULE "")
if (ATTENTION_AUTOSCHEDULER)
  if (NOT TARGET Halide::${ATTENTION_AUTOSCHEDULER})
    message(FATAL_ERROR "ATTENTION_AUTOSCHEDULER=${ATTENTION_AUTOSCHEDULER}: no such plugin in "
                        "${halide_library_dir} (Mullapudi2016, Li2018, Adams2019)")
  endif ()
  set(ATTENTION_SDPA_SCHEDULE AUTOSCHEDULER Halide::${ATTENTION_AUTOSCHEDULER}
      PARAMS autoscheduler.parallelism=${ATTENTION_HOST_CORES})
  if (ATTENTION_AUTOSCHEDULER STREQUAL "Adams2019")
    list(APPEND ATTENTION_SDPA_SCHEDULE PARAMS autoscheduler.beam_size=1)
  endif ()
endif ()

# The generator parameters that schedule with Halide::<name> through GuardedTails.
function(attention_autoscheduler_params OUT AUTOSCHEDULER)
  string(REGEX REPLACE ".*::" "" scheduler "${AUTOSCHEDULER}")
  set(${OUT} autoscheduler=GuardedTails autoscheduler.inner=${scheduler} PARENT_SCOPE)
endfunction()

# The kernels of the library, and what they were made with, as properties of this target (not
# global properties: a parent project's own targets never mix in).
add_custom_target(attention_kernel_list)

function(attention_halide_library NAME)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "GENERATOR;ASSEMBLY;AUTOSCHEDULER;NAMESPACE;FROM"
                        "PARAMS;TARGETS")
  if (NOT ARG_GENERATOR)
    message(FATAL_ERROR "attention_halide_library(${NAME}): GENERATOR is required")
  endif ()
  if (NOT ARG_FROM)
    set(ARG_FROM attention_generators)
  endif ()
  if (NOT ARG_TARGETS)
    set(ARG_TARGETS ${ATTENTION_TARGETS})
  endif ()
  if (ATTENTION_KERNELS_FROM)  # the same library, at the same place in that build
    file(RELATIVE_PATH here "${PROJECT_BINARY_DIR}" "${CMAKE_CURRENT_BINARY_DIR}")
    set(from "${ATTENTION_KERNELS_FROM}/${here}")
    if (NOT EXISTS "${from}/lib${NAME}.a" OR NOT EXISTS "${from}/${NAME}.h")
      message(FATAL_ERROR "ATTENTION_KERNELS_FROM: ${from} has no ${NAME} (lib${NAME}.a, ${NAME}.h); "
                          "build that directory first")
    endif ()
    add_library(${NAME} STATIC IMPORTED GLOBAL)
    set_target_properties(${NAME} PROPERTIES IMPORTED_LOCATION "${from}/lib${NAME}.a"
                                             INTERFACE_INCLUDE_DIRECTORIES "${from}")
    target_link_libraries(${NAME} INTERFACE attention_halide_runtime)
    if (ARG_ASSEMBLY)
      set(${ARG_ASSEMBLY} "${from}/${NAME}.s" PARENT_SCOPE)
    endif ()
    return()
  endif ()
  list(TRANSFORM ARG_TARGETS APPEND "${ATTENTION_TARGET_SUFFIX}")
  set(extra_outputs "")
  if (ARG_ASSEMBLY)
    set(extra_outputs ASSEMBLY assembly_file)
  endif ()
  if (ARG_AUTOSCHEDULER)
    # Through GuardedTails (generators/guarded_tails_autoscheduler.cpp): the autoscheduler's
    # schedule with tails that are safe for every shape.
    attention_autoscheduler_params(scheduler_params ${ARG_AUTOSCHEDULER})
    list(APPEND ARG_PARAMS ${scheduler_params})
    list(APPEND extra_outputs PLUGINS ${ARG_AUTOSCHEDULER})
  endif ()
  # user_context: the runtime passes a per-call context so errors raised on Halide's worker threads
  # still reach the call's Status. NAMESPACE: a C++ function name (ns::name), so an application's
  # own function of the same name links beside it.
  set(function_name ${NAME})
  set(features user_context)
  if (ARG_NAMESPACE)
    set(function_name ${ARG_NAMESPACE}::${NAME})
    list(APPEND features c_plus_plus_name_mangling)
  endif ()
  add_halide_library(${NAME} FROM ${ARG_FROM}
                     GENERATOR ${ARG_GENERATOR}
                     FUNCTION_NAME ${function_name}
                     PARAMS ${ARG_PARAMS}
                     TARGETS ${ARG_TARGETS}
                     FEATURES ${features}
                     USE_RUNTIME attention_halide_runtime
                     ${extra_outputs})
  if (ARG_ASSEMBLY)
    set(${ARG_ASSEMBLY} ${assembly_file} PARENT_SCOPE)
  endif ()
endfunction()

# attention_gpu_kernel(<name> GENERATOR <g> [PARAMS ...]): <name>_cuda and <name>_opencl, the
# generator's GPU schedule for each backend (x86 builds only).
function(attention_gpu_kernel NAME)
  if (NOT ATTENTION_GPU)
    return()
  endif ()
  attention_kernel(${NAME}_cuda ${ARGN} TARGETS ${ATTENTION_CUDA_TARGET})
  attention_kernel(${NAME}_opencl ${ARGN} TARGETS ${ATTENTION_OPENCL_TARGET})
endfunction()

function(attention_kernel NAME)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "ASSEMBLY;GENERATOR;AUTOSCHEDULER" "PARAMS;TARGETS")
  # The library's kernels are attention::kernels::<name> (runtime/src/kernels/generated_kernels.h).
  attention_halide_library(${NAME} ${ARGN} NAMESPACE attention::kernels)
  set_property(TARGET attention_kernel_list APPEND PROPERTY ATTENTION_KERNELS ${NAME})
  # What it was generated with, for the runtime's kernel table (runtime/CMakeLists.txt writes it
  # into attention_kernel_builds.inc; tests/kernel_contract_test.cpp checks each row against it).
  if (NOT ARG_TARGETS)
    set(ARG_TARGETS ${ATTENTION_TARGETS})
  endif ()
  if (ARG_AUTOSCHEDULER)
    attention_autoscheduler_params(scheduler_params ${ARG_AUTOSCHEDULER})
    list(APPEND ARG_PARAMS ${scheduler_params})
  endif ()
  string(JOIN " " params ${ARG_PARAMS})
  string(JOIN " " targets ${ARG_TARGETS})
  set_property(TARGET attention_kernel_list APPEND_STRING PROPERTY ATTENTION_KERNEL_BUILDS
               "    {\"${NAME}\", \"${ARG_GENERATOR}\", \"${params}\", \"${targets}\"},\n")
  if (ARG_ASSEMBLY)
    set(${ARG_ASSEMBLY} ${${ARG_ASSEMBLY}} PARENT_SCOPE)
  endif ()
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
