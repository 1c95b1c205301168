# The installed package from the outside (tests/consumer/): installs BUILD_DIR into a fresh prefix
# under WORK_DIR, copies the consumer project out of the source tree, then
#   1. builds it with CMake, finding attention only through CMAKE_PREFIX_PATH=<prefix>, and runs it;
#   2. builds it with make and pkg-config (PKG_CONFIG_PATH=<prefix>/lib.../pkgconfig), and runs it.
# cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=... -DLIBDIR=lib -P consumer_test.cmake
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  message("${output}")
  if (NOT result EQUAL 0)
    list(JOIN ARGN " " command)
    message(FATAL_ERROR "failed (${result}): ${command}")
  endif ()
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")
run("${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${prefix}")
file(COPY "${SOURCE_DIR}/tests/consumer/" DESTINATION "${WORK_DIR}/src")

# 1. CMake: find_package(attention CONFIG) from the prefix alone (no package registry, no build tree).
run("${CMAKE_COMMAND}" -S "${WORK_DIR}/src" -B "${WORK_DIR}/cmake-build" -G "Unix Makefiles"
    -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=${prefix}"
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
file(STRINGS "${WORK_DIR}/cmake-build/CMakeCache.txt" found REGEX "^attention_DIR:")
if (NOT found MATCHES "=${prefix}/")
  message(FATAL_ERROR "the consumer found attention outside the install prefix: ${found}")
endif ()
run("${CMAKE_COMMAND}" --build "${WORK_DIR}/cmake-build")
run("${WORK_DIR}/cmake-build/consumer")

# 2. make + pkg-config.
set(ENV{PKG_CONFIG_PATH} "${prefix}/${LIBDIR}/pkgconfig")
run(make -C "${WORK_DIR}/src")
run("${WORK_DIR}/src/consumer_pkgconfig")
message("consumer checks passed (CMake package and pkg-config)")
