# Cross build for 64-bit ARM Linux from an x86-64 Debian machine (g++-aarch64-linux-gnu), with the
# test binaries run through qemu-aarch64 (qemu-user; there is no binfmt, so CMake prefixes every
# test command with the emulator). scripts/test_aarch64.sh shows the whole flow: the generators
# come from a host build (-Dattention_kernels-halide_generators_ROOT=<host build dir>).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Dynamically linked aarch64 binaries need the cross toolchain's loader and libraries.
set(ATTENTION_QEMU_LD_PREFIX /usr/aarch64-linux-gnu CACHE PATH "qemu-aarch64 -L prefix")
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L ${ATTENTION_QEMU_LD_PREFIX})
# Libraries, headers and packages are looked up only under the cross toolchain's own prefix
# (Debian's *-arm64-cross packages, which scripts/install_deps.sh installs), so a host-architecture
# package or a hand-installed arm64 one (multiarch, /usr/lib/aarch64-linux-gnu) is never picked up
# by accident. Programs (the generators, Python) are the host's. What comes from outside that
# prefix is named explicitly: Halide's CMake package (Halide_DIR, from the host's wheel), the host
# build's generators (attention_kernels-halide_generators_ROOT, which Halide's helper looks up in
# both places) and GoogleTest, built from Debian's sources (/usr/src/googletest).
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
