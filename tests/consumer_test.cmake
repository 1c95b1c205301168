# The installed package from the outside (tests/consumer/): installs BUILD_DIR into a fresh prefix
# under WORK_DIR, copies the consumer project out of the source tree, and builds it finding
# attention only in that prefix.
#
# Native (no TOOLCHAIN):
#   1. CMake: the consumer against the prebuilt library, beside its own Halide pipeline (Halide's
#      package at HALIDE_DIR), consumer_generated with a kernel library that
#      attention_add_kernel_library() generates for KERNEL_TARGETS, and consumer_mods_check with
#      the consumer's own mods that attention_add_mod_library() compiles; all run;
#   2. attention-gen, run by hand with the same arguments, writes byte-identical kernels;
#      (and with GPU_MOD_TARGET, the same mods as GPU kernels, run on that backend);
#   3. bad calls of the function and of the tool stop with a message naming the bad value;
#   4. make + pkg-config against the prebuilt library.
# Cross (TOOLCHAIN, HOST_BUILD_DIR, EMULATOR): the package of the cross build BUILD_DIR and the tools
# of the host build HOST_BUILD_DIR (installed apart, as a user would have them); without the host
# tool the function stops with a clear message; with it, both programs are cross-built and run
# under EMULATOR. Then the mods: a native build of the consumer against the host build's package
# builds and exports the mod generator, the cross build imports it (without it, a clear message),
# generates the mod kernels for KERNEL_TARGETS and the mods' check runs under EMULATOR.
#
# cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=... -DLIBDIR=lib -DKERNEL_TARGETS=...
#       -DHALIDE_DIR=... [-DGPU_MOD_TARGET=...] [-DTOOLCHAIN=... -DHOST_BUILD_DIR=... -DEMULATOR=...] -P consumer_test.cmake
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  message("${output}")
  if (NOT result EQUAL 0)
    list(JOIN ARGN " " command)
    message(FATAL_ERROR "failed (${result}): ${command}")
  endif ()
endfunction()

# Runs a command that must fail with `expected` in its output.
function(expect_failure expected)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  string(REGEX REPLACE "[ \n]+" " " output "${output}")  # CMake wraps its messages
  string(FIND "${output}" "${expected}" at)
  list(JOIN ARGN " " command)
  if (result EQUAL 0 OR at EQUAL -1)
    message(FATAL_ERROR "expected a failure saying \"${expected}\" (exit ${result}): ${command}\n"
                        "${output}")
  endif ()
  message("refused as expected: ${expected}")
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")
run("${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${prefix}")
file(COPY "${SOURCE_DIR}/tests/consumer/" DESTINATION "${WORK_DIR}/src")
set(configure "${CMAKE_COMMAND}" -S "${WORK_DIR}/src" -G "Unix Makefiles" -DCMAKE_BUILD_TYPE=Release
              -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)

if (TOOLCHAIN)
  set(native_configure ${configure})  # the mod generator's build, for this machine
  set(host_prefix "${WORK_DIR}/host-tools")
  run("${CMAKE_COMMAND}" --install "${HOST_BUILD_DIR}" --prefix "${host_prefix}"
      --component attention_tools)
  file(COPY "${TOOLCHAIN}" DESTINATION "${WORK_DIR}")
  get_filename_component(toolchain_name "${TOOLCHAIN}" NAME)
  # The toolchain confines package lookups to the cross prefix: the package is named directly.
  list(APPEND configure "-DCMAKE_TOOLCHAIN_FILE=${WORK_DIR}/${toolchain_name}"
       "-Dattention_DIR=${prefix}/${LIBDIR}/cmake/attention"
       "-DCONSUMER_KERNEL_TARGETS=${KERNEL_TARGETS}")
  expect_failure("has no generator for this build machine"
                 ${configure} -B "${WORK_DIR}/no-host-tools")
  list(APPEND configure "-DATTENTION_GEN_EXECUTABLE=${host_prefix}/bin/attention-gen")
  run(${configure} -B "${WORK_DIR}/cmake-build")
  run("${CMAKE_COMMAND}" --build "${WORK_DIR}/cmake-build")
  separate_arguments(emulator UNIX_COMMAND "${EMULATOR}")
  run(${emulator} "${WORK_DIR}/cmake-build/consumer")
  run(${emulator} "${WORK_DIR}/cmake-build/consumer_generated")

  # Mods: the generator, built natively from the consumer's own mod file, runs here.
  set(host_package "${WORK_DIR}/host-package")
  run("${CMAKE_COMMAND}" --install "${HOST_BUILD_DIR}" --prefix "${host_package}")
  set(mods -DCONSUMER_MODS=ON "-DHalide_DIR=${HALIDE_DIR}")
  run(${native_configure} -B "${WORK_DIR}/mod-generator" "-DCMAKE_PREFIX_PATH=${host_package}"
      ${mods})
  run("${CMAKE_COMMAND}" --build "${WORK_DIR}/mod-generator"
      --target consumer_mods-halide_generators)
  list(APPEND mods "-DCONSUMER_MOD_TARGETS=${KERNEL_TARGETS}")
  expect_failure("build its target consumer_mods-halide_generators"
                 ${configure} -B "${WORK_DIR}/no-mod-generator" ${mods})
  run(${configure} -B "${WORK_DIR}/cmake-build" ${mods}
      "-Dconsumer_mods-halide_generators_ROOT=${WORK_DIR}/mod-generator")
  run("${CMAKE_COMMAND}" --build "${WORK_DIR}/cmake-build" --target consumer_mods_check)
  run(${emulator} "${WORK_DIR}/cmake-build/consumer_mods_check")
  message("cross consumer checks passed (prebuilt and generated ${KERNEL_TARGETS} kernels, the "
          "consumer's own mods)")
  return()
endif ()

# 1. CMake: find_package(attention CONFIG) from the prefix alone (no package registry, no build tree).
run(${configure} -B "${WORK_DIR}/cmake-build" "-DCMAKE_PREFIX_PATH=${prefix}"
    "-DCONSUMER_KERNEL_TARGETS=${KERNEL_TARGETS}" -DCONSUMER_APP_PIPELINE=ON
    "-DHalide_DIR=${HALIDE_DIR}" -DCONSUMER_MODS=ON "-DCONSUMER_MOD_TARGETS=${KERNEL_TARGETS}")
file(STRINGS "${WORK_DIR}/cmake-build/CMakeCache.txt" found REGEX "^attention_DIR:")
if (NOT found MATCHES "=${prefix}/")
  message(FATAL_ERROR "the consumer found attention outside the install prefix: ${found}")
endif ()
run("${CMAKE_COMMAND}" --build "${WORK_DIR}/cmake-build")
run("${WORK_DIR}/cmake-build/consumer")
run("${WORK_DIR}/cmake-build/consumer_generated")
run("${WORK_DIR}/cmake-build/consumer_mods_check")
# The same mods for a GPU target (GPU_MOD_TARGET, a package built with GPU kernels): the same
# checks, the kernels run on that backend (OpenCL on PoCL here), the prefill kernel serving decode.
if (GPU_MOD_TARGET)
  run(${configure} -B "${WORK_DIR}/gpu-mods" "-DCMAKE_PREFIX_PATH=${prefix}"
      "-DHalide_DIR=${HALIDE_DIR}" -DCONSUMER_MODS=ON "-DCONSUMER_MOD_TARGETS=${GPU_MOD_TARGET}"
      "-DCONSUMER_MOD_DECODE=")
  run("${CMAKE_COMMAND}" --build "${WORK_DIR}/gpu-mods" --target consumer_mods_check)
  run("${WORK_DIR}/gpu-mods/consumer_mods_check")
  expect_failure("a GPU library's prefill kernel serves decode calls too" ${configure}
                 -B "${WORK_DIR}/bad-gpu-mods" "-DCMAKE_PREFIX_PATH=${prefix}" -DCONSUMER_MODS=ON
                 "-DHalide_DIR=${HALIDE_DIR}" "-DCONSUMER_MOD_TARGETS=${GPU_MOD_TARGET}")
endif ()

# 2. The tool by hand, with the function's inputs, one generator process at a time (the function
# runs one per hardware thread): the same bytes.
set(gen "${prefix}/bin/attention-gen")
run("${gen}" --name consumer_kernels --kernels sdpa,sdpa_bf16kv --targets "${KERNEL_TARGETS}"
    --out "${WORK_DIR}/by-hand" --jobs 1)
file(GLOB generated RELATIVE "${WORK_DIR}/by-hand" "${WORK_DIR}/by-hand/*")
list(LENGTH generated count)
foreach (file IN LISTS generated)
  run("${CMAKE_COMMAND}" -E compare_files "${WORK_DIR}/by-hand/${file}"
      "${WORK_DIR}/cmake-build/consumer_kernels/${file}")
endforeach ()
message("attention-gen and attention_add_kernel_library wrote the same ${count} files")

# 3. Bad calls: one clear message naming the bad value.
expect_failure("unknown kernel 'flash'" ${configure} -B "${WORK_DIR}/bad-kernel"
               "-DCMAKE_PREFIX_PATH=${prefix}" "-DCONSUMER_KERNEL_TARGETS=${KERNEL_TARGETS}"
               -DCONSUMER_KERNELS=flash)
expect_failure("unknown target 'x86-64-linux-avx3'" ${configure} -B "${WORK_DIR}/bad-target"
               "-DCMAKE_PREFIX_PATH=${prefix}" -DCONSUMER_KERNEL_TARGETS=x86-64-linux-avx3)
expect_failure("target 'arm-64-linux' is not for" ${configure} -B "${WORK_DIR}/bad-arch"
               "-DCMAKE_PREFIX_PATH=${prefix}" -DCONSUMER_KERNEL_TARGETS=arm-64-linux)
expect_failure("unknown kernel 'flash'" "${gen}" --name k --kernels flash --targets
               "${KERNEL_TARGETS}" --out "${WORK_DIR}/bad")
expect_failure("unknown schedule parameter 'tile'" "${gen}" --name k --kernels sdpa --targets
               "${KERNEL_TARGETS}" --schedule tile=4 --out "${WORK_DIR}/bad")
expect_failure("--jobs 'many': expected a whole number from 1 to 256" "${gen}" --name k --kernels
               sdpa --targets "${KERNEL_TARGETS}" --jobs many --out "${WORK_DIR}/bad")
# A tiling value the schedule cannot honour on the target: refused by --dry-run (configure time).
expect_failure("score_queries=18: must be a multiple of the" "${gen}" --name k --kernels sdpa
               --targets "${KERNEL_TARGETS}" --schedule score_queries=18 --out "${WORK_DIR}/bad"
               --dry-run)
# The target as the user wrote it, without the features the tool adds.
execute_process(COMMAND "${gen}" --name k --kernels sdpa --targets x86-64-linux-avx3 --out
                        "${WORK_DIR}/bad" ERROR_VARIABLE output RESULT_VARIABLE result)
if (result EQUAL 0 OR NOT output MATCHES "unknown target 'x86-64-linux-avx3'" OR
    output MATCHES "user_context|no_runtime|name_mangling")
  message(FATAL_ERROR "attention-gen's message for an unknown target: ${output}")
endif ()
run("${gen}" --list)
expect_failure("DECODE names 'causal', which is in neither MODS nor MASK_MODS" ${configure}
               -B "${WORK_DIR}/bad-mods" "-DCMAKE_PREFIX_PATH=${prefix}" -DCONSUMER_MODS=ON
               "-DHalide_DIR=${HALIDE_DIR}" -DCONSUMER_MOD_DECODE=causal)

# 4. make + pkg-config.
set(ENV{PKG_CONFIG_PATH} "${prefix}/${LIBDIR}/pkgconfig")
run(make -C "${WORK_DIR}/src")
run("${WORK_DIR}/src/consumer_pkgconfig")
message("consumer checks passed (CMake package, generated kernels, attention-gen, pkg-config)")
