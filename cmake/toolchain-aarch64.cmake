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
# No CMAKE_FIND_ROOT_PATH: packages (Halide's CMake files, the generators exported by the host
# build) are found where they are; the compiler's multiarch paths serve aarch64 libraries.
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
