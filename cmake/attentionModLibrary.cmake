# attention_add_mod_library(): the application's own score and mask mods (docs/mods.md)
# compiled into fused SDPA kernels by an installed attention package.
#
#   attention_add_mod_library(<name>
#     SOURCES <file.cpp>...     C++ files defining the mods with ATTENTION_MOD (attention/generator/mod.h)
#     MODS <mod>...             mods with a score_mod only: a prefill kernel each
#     MASK_MODS <mod>...        mods with a mask_mod: a prefill kernel and the key-range scan that
#                               lets it skip key splits the mask hides
#     [DECODE <mod>...]         mods (of MODS or MASK_MODS) that also get a decode kernel (Sq <= 2;
#                               CPU targets: on a GPU the prefill kernel serves decode calls)
#     [TARGETS <target>...])    Halide targets, default: the CPU of this build machine ("host");
#                               required when cross-compiling (e.g. arm-64-linux). Or one GPU
#                               target (e.g. host-cuda-cuda_capability_80, host-opencl): the
#                               kernels then run on that backend, with the package's GPU runtime
#                               (an attention package built with ATTENTION_GPU)
#
# builds a generator from the package's generator sources (share/attention/generators) and SOURCES
# with Halide's CMake package (find_package(Halide), the version the package was built with), runs
# it for each kernel, and makes the static library <name>, whose header <name>.h declares for each
# mod `attention::ModKernels <name>::<mod>()`, the argument of attention::mod_attention.
#
# The generator must run on the build machine, so a cross build imports it, as Halide's helpers do:
# a native build of the same project (against an attention install for the build machine) exports
# it as the package <name>-halide_generators (`cmake --build <native> --target
# <name>-halide_generators` builds nothing else), and the cross build is configured with
# -D<name>-halide_generators_ROOT=<native build directory>.
include_guard(GLOBAL)
include("${CMAKE_CURRENT_LIST_DIR}/attentionKernelLibrary.cmake")  # the targets' processor check
include("${CMAKE_CURRENT_LIST_DIR}/attentionHalide.cmake")

function(attention_add_mod_library NAME)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "" "SOURCES;MODS;MASK_MODS;DECODE;TARGETS")
  set(where "attention_add_mod_library(${NAME})")
  if (ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "${where}: unknown argument '${ARG_UNPARSED_ARGUMENTS}' "
                        "(expected SOURCES, MODS, MASK_MODS, DECODE, TARGETS)")
  endif ()
  if (NOT ARG_SOURCES OR NOT (ARG_MODS OR ARG_MASK_MODS))
    message(FATAL_ERROR "${where}: SOURCES and at least one of MODS, MASK_MODS are required")
  endif ()
  if (NOT NAME MATCHES "^[A-Za-z_][A-Za-z0-9_]*$")
    message(FATAL_ERROR "${where}: the name must be a C++ identifier (it names the namespace)")
  endif ()
  foreach (mod IN LISTS ARG_DECODE)
    if (NOT mod IN_LIST ARG_MODS AND NOT mod IN_LIST ARG_MASK_MODS)
      message(FATAL_ERROR "${where}: DECODE names '${mod}', which is in neither MODS nor MASK_MODS")
    endif ()
  endforeach ()
  set(generator ${NAME}_generators)
  set(package ${NAME}-halide_generators)
  set(namespace ${NAME}::halide_generators::)
  if (CMAKE_CROSSCOMPILING)
    if (NOT ARG_TARGETS)
      message(FATAL_ERROR "${where}: cross-compiling for ${CMAKE_SYSTEM_PROCESSOR}: name the "
                          "kernels' TARGETS (e.g. arm-64-linux)")
    endif ()
    find_package(${package} QUIET CMAKE_FIND_ROOT_PATH_BOTH)
    if (NOT TARGET ${namespace}${generator})
      message(FATAL_ERROR
              "${where}: cross-compiling for ${CMAKE_SYSTEM_PROCESSOR}, and the mod generator must "
              "run on this build machine (${CMAKE_HOST_SYSTEM_PROCESSOR}): configure this project "
              "natively against an attention install built for ${CMAKE_HOST_SYSTEM_PROCESSOR}, "
              "build its target ${package}, and pass -D${package}_ROOT=<that build directory>")
    endif ()
  endif ()
  if (NOT ARG_TARGETS)
    set(ARG_TARGETS host)
  endif ()
  # A library's kernels are for one backend: mod_attention runs them there.
  set(gpu_targets ${ARG_TARGETS})
  list(FILTER gpu_targets INCLUDE REGEX "(^|-)(cuda|opencl)(-|$)")
  list(LENGTH gpu_targets gpu_count)
  list(LENGTH ARG_TARGETS target_count)
  if (gpu_count GREATER 0 AND NOT target_count EQUAL 1)
    message(FATAL_ERROR "${where}: TARGETS '${ARG_TARGETS}': CPU targets, or one CUDA or OpenCL "
                        "target (a library's kernels run on one backend; make one library each)")
  endif ()
  if (gpu_count GREATER 0 AND ARG_DECODE)
    message(FATAL_ERROR "${where}: DECODE with the GPU target ${ARG_TARGETS}: a GPU library's "
                        "prefill kernel serves decode calls too")
  endif ()
  _attention_check_target_processor("${where}" ${ARG_TARGETS})
  if (NOT COMMAND add_halide_library OR (NOT CMAKE_CROSSCOMPILING AND NOT TARGET Halide::Generator))
    _attention_find_halide()
  endif ()

  # Natively: built here and exported for cross builds; cross-compiling: the import found above.
  set(kit "${attention_GENERATOR_SOURCES_DIR}")
  add_halide_generator(${generator} PACKAGE_NAME ${package} PACKAGE_NAMESPACE ${namespace}
                       SOURCES "${kit}/sdpa_generator.cpp" ${ARG_SOURCES})
  if (NOT CMAKE_CROSSCOMPILING)
    target_include_directories(${generator} PRIVATE "${kit}" "${attention_INCLUDE_DIR}")
  endif ()
  # The kernels call the Halide runtime inside libattention (user_context: the library's per-call
  # context carries errors back into its Status).
  add_library(${NAME}_runtime INTERFACE)
  target_link_libraries(${NAME}_runtime INTERFACE attention::attention)

  add_library(${NAME} INTERFACE)
  set(header "${CMAKE_CURRENT_BINARY_DIR}/${NAME}/${NAME}.h")
  set(includes "")
  set(functions "")
  foreach (mod IN LISTS ARG_MODS ARG_MASK_MODS)
    set(variants prefill)
    if (mod IN_LIST ARG_MASK_MODS)
      list(APPEND variants ranges)
    endif ()
    if (mod IN_LIST ARG_DECODE)
      list(APPEND variants decode)
    endif ()
    set(slots "")
    foreach (variant IN ITEMS prefill decode ranges)
      if (NOT variant IN_LIST variants)
        string(APPEND slots ", {}")
        continue ()
      endif ()
      set(kernel ${NAME}_${mod}_${variant})
      set(params mod=${mod} query_tiling=${variant})
      if (variant STREQUAL "ranges")
        set(params mod=${mod} query_tiling=prefill output=key_ranges)
      endif ()
      add_halide_library(${kernel} FROM ${namespace}${generator} GENERATOR mod_sdpa PARAMS ${params}
                         TARGETS ${ARG_TARGETS} FEATURES user_context USE_RUNTIME ${NAME}_runtime)
      target_link_libraries(${NAME} INTERFACE ${kernel})
      string(APPEND includes "#include \"${kernel}.h\"\n")
      string(APPEND slots ", ATTENTION_MOD_KERNEL(${kernel})")
    endforeach ()
    string(APPEND functions
           "inline attention::ModKernels ${mod}() { return {\"${mod}\"${slots}}; }\n")
  endforeach ()
  string(CONCAT content
         "// Written by attention_add_mod_library(${NAME}): the mods' kernels for "
         "attention::mod_attention.\n#pragma once\n\n#include \"attention/mod_attention.h\"\n"
         "${includes}\nnamespace ${NAME} {\n\n${functions}\n}  // namespace ${NAME}\n")
  file(GENERATE OUTPUT "${header}" CONTENT "${content}")
  target_include_directories(${NAME} INTERFACE "${CMAKE_CURRENT_BINARY_DIR}/${NAME}")
  target_link_libraries(${NAME} INTERFACE attention::attention)
endfunction()
