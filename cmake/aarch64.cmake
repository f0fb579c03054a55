# Cross-build for 64-bit ARM (the devices) with Debian's aarch64 toolchain and its arm64
# multiarch libraries (dpkg --add-architecture arm64; scripts/deps.sh aarch64 installs both).
# Tests run under qemu-user: CMake uses CMAKE_CROSSCOMPILING_EMULATOR for gtest discovery and
# ctest. qemu's default CPU here is `max` (NEON, SVE, SVE2); TLR_QEMU_CPU picks the model and
# the SVE vector length, which decides which Highway targets the kernels can run on:
#   max,sve-default-vector-length=16  -> NEON, SVE, SVE2 and SVE2_128 (128-bit, as on N2 / phones)
#   max,sve-default-vector-length=32  -> NEON, SVE, SVE2 and SVE_256 (256-bit, as on V1)
# Used by the aarch64 preset (CMakePresets.json) and `make aarch64-test`.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Debian multiarch: arm64 libraries live in /usr/lib/aarch64-linux-gnu beside the host's, and
# the architecture-independent headers in /usr/include serve both.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")

set(TLR_QEMU_CPU "max,sve-default-vector-length=16" CACHE STRING "qemu-aarch64 -cpu for the tests")
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-L;/usr/aarch64-linux-gnu;-cpu;${TLR_QEMU_CPU})
