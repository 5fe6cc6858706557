# The Debian package: "cmake --build build --target package" writes
# build/urvt_<version>_<arch>.deb (CPack's DEB generator). It holds what
# "cmake --install" installs, under /usr: urvt-run and urvt-stat in /usr/bin,
# the libraries in /usr/${URVT_INSTALL_LIBDIR} (their own directory; the
# system's libibverbs is never touched), the man pages. tests/package checks
# it by installing and purging it.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME urvt)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_PACKAGE_CONTACT "urvt maintainers <urvt@localhost>")
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "urvt maintainers <urvt@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "RDMA verbs and RoCE v2 in user space")
set(CPACK_PACKAGE_DESCRIPTION
"urvt is rdmavt's queue-pair layer in user space with RoCE v2 engines under
it and a drop-in libibverbs.so.1 (rdma-core 44 ABI) on top. Unmodified verbs
programs (ibverbs-utils, perftest, your own) run over it with urvt-run,
without RDMA hardware, kernel module or privileges: in-process, through
shared memory between processes of one host, or as RoCE v2 over UDP to other
hosts, rxe and RoCE NICs. The system's libibverbs is left in place.")
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)   # urvt_<version>_<arch>.deb
# Library dependencies from the binaries (libc6), computed by dpkg-shlibdeps when it exists.
find_program(URVT_DPKG_SHLIBDEPS dpkg-shlibdeps)
if(URVT_DPKG_SHLIBDEPS)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
  # Our private libibverbs is not a system shared library: let
  # dpkg-shlibdeps find it for the dependency walk of urvt's own binaries.
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${PROJECT_BINARY_DIR}/lib/urvt)
else()
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "libc6 (>= 2.34)")
endif()
# The programs urvt-run is for come from these; none is needed by urvt.
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "ibverbs-utils, perftest, rdmacm-utils")
set(CPACK_STRIP_FILES ON)
# Only the runtime: the libibverbs.so development link (component
# Development) is of no use next to the system's -dev package.
set(CPACK_INSTALL_CMAKE_PROJECTS "${PROJECT_BINARY_DIR};${PROJECT_NAME};Unspecified;/")
include(CPack)
