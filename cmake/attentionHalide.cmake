# _attention_find_halide([<version>]): find_package(Halide [<version>] REQUIRED) from Halide_DIR,
# in cross builds too. A toolchain file that confines package lookups to the target's prefix
# (cmake/toolchain-aarch64.cmake) would not reach Halide's helpers beside Halide_DIR, so they are
# named explicitly; a cross build has no Python for the target, so Halide's Python bindings (never
# used) are not looked up. A macro: the package's variables land in the caller's scope.
include_guard(GLOBAL)

macro(_attention_find_halide)
  if (Halide_DIR AND NOT HalideHelpers_DIR)
    get_filename_component(_attention_halide_cmake_dir "${Halide_DIR}" DIRECTORY)
    set(HalideHelpers_DIR "${_attention_halide_cmake_dir}/HalideHelpers")
  endif ()
  if (CMAKE_CROSSCOMPILING)
    set(CMAKE_DISABLE_FIND_PACKAGE_Halide_Python ON)
  endif ()
  find_package(Halide ${ARGN} REQUIRED)
endmacro()
