# `cmake --install <build> --prefix P`: the library with every generated kernel linked in, the
# public headers, a CMake package (find_package(attention CONFIG) -> attention::attention, with a
# version file) and a pkg-config file (attention.pc). Everything is found relative to P, so the
# prefix can be moved or packaged.
#
# The kernels are separate static libraries in the build tree (one per attention_kernel()); the
# installed libattention.a is one archive holding the runtime's objects, every kernel's objects and
# Halide's runtime (cmake/merge_archives.cmake), so a user links one file.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

get_property(attention_installed_kernels TARGET attention_kernel_list
             PROPERTY ATTENTION_KERNELS)
set(attention_archive "${PROJECT_BINARY_DIR}/package/libattention.a")
set(attention_archive_list "${PROJECT_BINARY_DIR}/package/archives.txt")
set(archives "$<TARGET_FILE:attention>")
foreach (kernel IN LISTS attention_installed_kernels ITEMS attention_halide_runtime)
  string(APPEND archives "\n$<TARGET_FILE:${kernel}>")
endforeach ()
file(GENERATE OUTPUT "${attention_archive_list}" CONTENT "${archives}\n")
add_custom_command(
  OUTPUT "${attention_archive}"
  COMMAND "${CMAKE_COMMAND}" -DAR=${CMAKE_AR} -DOUTPUT=${attention_archive}
          -DLIST=${attention_archive_list} -P "${PROJECT_SOURCE_DIR}/cmake/merge_archives.cmake"
  DEPENDS attention attention_halide_runtime ${attention_installed_kernels}
          "${attention_archive_list}" "${PROJECT_SOURCE_DIR}/cmake/merge_archives.cmake"
  COMMENT "Merging the runtime and every kernel into package/libattention.a"
  VERBATIM)
add_custom_target(attention_package ALL DEPENDS "${attention_archive}")

# The shared library: the archive's objects (all position-independent) behind cmake/attention.map,
# which exports the public API and Halide's runtime (generated kernel libraries call it) and
# nothing else. Built in every uninstrumented native build (SharedLibraryExports checks it) and in
# any -DBUILD_SHARED_LIBS=ON build, which installs it in place of the archive.
find_package(Threads REQUIRED)
set(attention_shared_built OFF)
if (NOT ATTENTION_SANITIZE AND NOT ATTENTION_FUZZ
    AND (NOT CMAKE_CROSSCOMPILING OR BUILD_SHARED_LIBS))
  set(attention_shared_built ON)
  file(WRITE "${PROJECT_BINARY_DIR}/package/shared_library.cpp"
       "// libattention.so's objects are those of libattention.a (cmake/AttentionInstall.cmake).\n")
  add_library(attention_shared SHARED "${PROJECT_BINARY_DIR}/package/shared_library.cpp")
  set_target_properties(attention_shared PROPERTIES
                        OUTPUT_NAME attention
                        LIBRARY_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}/package/shared"
                        LINK_DEPENDS
                        "${attention_archive};${PROJECT_SOURCE_DIR}/cmake/attention.map")
  target_link_options(attention_shared PRIVATE
                      "LINKER:--whole-archive" "${attention_archive}" "LINKER:--no-whole-archive"
                      "LINKER:--version-script=${PROJECT_SOURCE_DIR}/cmake/attention.map"
                      "LINKER:--no-undefined")
  target_link_libraries(attention_shared PRIVATE Threads::Threads ${CMAKE_DL_LIBS} m)
  target_include_directories(attention_shared INTERFACE ${PROJECT_SOURCE_DIR}/runtime/include)
  add_dependencies(attention_shared attention_package)
endif ()

if (BUILD_SHARED_LIBS)
  if (NOT attention_shared_built)
    message(FATAL_ERROR "BUILD_SHARED_LIBS: not with ATTENTION_SANITIZE or ATTENTION_FUZZ")
  endif ()
  install(TARGETS attention_shared LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  set(ATTENTION_PACKAGE_LIBRARY_TYPE SHARED)
  set(ATTENTION_PACKAGE_LIBRARY_FILE libattention.so)
else ()
  install(FILES "${attention_archive}" DESTINATION ${CMAKE_INSTALL_LIBDIR})
  set(ATTENTION_PACKAGE_LIBRARY_TYPE STATIC)
  set(ATTENTION_PACKAGE_LIBRARY_FILE libattention.a)
endif ()
install(DIRECTORY "${PROJECT_SOURCE_DIR}/runtime/include/attention"
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES "${PROJECT_SOURCE_DIR}/LICENSE" DESTINATION ${CMAKE_INSTALL_DATADIR}/attention)
# Mods (attention_add_mod_library): the header a mod is written against, and the sources of the
# generator that compiles mods into kernels.
install(DIRECTORY "${PROJECT_SOURCE_DIR}/generators/include/attention/generator"
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/attention)
set(ATTENTION_GENERATOR_SOURCES_DIR ${CMAKE_INSTALL_DATADIR}/attention/generators)
install(DIRECTORY "${PROJECT_SOURCE_DIR}/generators/algorithm" "${PROJECT_SOURCE_DIR}/generators/schedule"
                  "${PROJECT_SOURCE_DIR}/generators/contract"
        DESTINATION ${ATTENTION_GENERATOR_SOURCES_DIR} FILES_MATCHING PATTERN "*.h")
install(FILES "${PROJECT_SOURCE_DIR}/generators/sdpa_generator.cpp"
              "${PROJECT_SOURCE_DIR}/generators/generator_inputs.h"
        DESTINATION ${ATTENTION_GENERATOR_SOURCES_DIR})

# What a consumer must link besides the archive: the GPU backends' dlopen and Halide's thread pool.
set(ATTENTION_PACKAGE_LIBS "-ldl -lpthread -lm")
# The Halide targets the kernels were built for, best first (attention_TARGETS in the package).
string(JOIN ";" ATTENTION_PACKAGE_TARGETS ${ATTENTION_TARGETS})
set(config_dir ${CMAKE_INSTALL_LIBDIR}/cmake/attention)
configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/attentionConfig.cmake.in"
                              "${PROJECT_BINARY_DIR}/package/attentionConfig.cmake"
                              INSTALL_DESTINATION ${config_dir}
                              PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_LIBDIR
                                        ATTENTION_GENERATOR_SOURCES_DIR)
write_basic_package_version_file("${PROJECT_BINARY_DIR}/package/attentionConfigVersion.cmake"
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES "${PROJECT_BINARY_DIR}/package/attentionConfig.cmake"
              "${PROJECT_BINARY_DIR}/package/attentionConfigVersion.cmake"
              "${PROJECT_SOURCE_DIR}/cmake/attentionKernelLibrary.cmake"
              "${PROJECT_SOURCE_DIR}/cmake/attentionModLibrary.cmake"
              "${PROJECT_SOURCE_DIR}/cmake/attentionHalide.cmake"
        DESTINATION ${config_dir})
# attention.pc finds the prefix from its own place (pkg-config's pcfiledir): relocatable too.
file(RELATIVE_PATH ATTENTION_PC_TO_PREFIX "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
string(REGEX REPLACE "/$" "" ATTENTION_PC_TO_PREFIX "${ATTENTION_PC_TO_PREFIX}")
configure_file("${PROJECT_SOURCE_DIR}/cmake/attention.pc.in" "${PROJECT_BINARY_DIR}/package/attention.pc"
               @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/package/attention.pc"
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
