# Debian packages, made by CPack from the install components of
# cmake/DlockInstall.cmake and src/cli (docs/install.md, Debian packages):
#
#   dlock            the command: bin/dlock, man pages, bash completion
#                    (component cli)
#   dlock-full       bin/dlock-full, to which dlock hands the stores whose
#                    client libraries it does not load (component full);
#                    recommended by dlock, so apt installs it by default
#   libdlock<SOVERSION>  libdlock.so.<SOVERSION> (component lib); named after
#                    the SONAME, so two ABIs can be installed side by side
#   libdlock-dev     headers, libdlock.so, libdlock.a, the test doubles, the
#                    CMake and pkg-config files (component dev)
#
#   cpack --config build/CPackConfig.cmake -B build/packages
#
# Depends are computed from the binaries (dpkg-shlibdeps); libdlock-dev adds
# the -dev packages its pkg-config and static CMake files name.
# scripts/deb_check.sh builds them, runs lintian, and installs them on a fresh
# Debian 12.
set(DLOCK_DEB_MAINTAINER "dlock developers <dlock@example.org>" CACHE STRING
    "Maintainer field of the Debian packages")
set(DLOCK_DEB_RELEASE 1)
set(DLOCK_DEB_VERSION ${PROJECT_VERSION}-${DLOCK_DEB_RELEASE})
set(lib_package libdlock${DLOCK_SOVERSION})

# Every package carries the copyright and changelog Debian policy asks for,
# under its own name; only when packaging (EXCLUDE_FROM_ALL keeps them out
# of a plain `cmake --install`).
configure_file(${PROJECT_SOURCE_DIR}/packaging/deb/changelog.in
               ${PROJECT_BINARY_DIR}/packaging/changelog @ONLY)
set(changelog_gz ${PROJECT_BINARY_DIR}/packaging/changelog.Debian.gz)
add_custom_command(OUTPUT ${changelog_gz}
  COMMAND gzip -9nc ${PROJECT_BINARY_DIR}/packaging/changelog > ${changelog_gz}
  DEPENDS ${PROJECT_BINARY_DIR}/packaging/changelog)
add_custom_target(dlock_deb_changelog ALL DEPENDS ${changelog_gz})
foreach(pair cli:dlock full:dlock-full lib:${lib_package} dev:libdlock-dev)
  string(REPLACE ":" ";" pair ${pair})
  list(GET pair 0 component)
  list(GET pair 1 package)
  install(FILES ${PROJECT_SOURCE_DIR}/packaging/deb/copyright ${changelog_gz}
          DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${package}
          COMPONENT ${component} EXCLUDE_FROM_ALL)
  string(TOUPPER ${component} upper)
  set(CPACK_DEBIAN_${upper}_PACKAGE_NAME ${package})
  set(CPACK_DEBIAN_${upper}_FILE_NAME DEB-DEFAULT)
endforeach()

set(dev_depends "${lib_package} (= ${DLOCK_DEB_VERSION})")
foreach(store IN LISTS DLOCK_STORES_BUILT)
  if(DLOCK_STORE_${store}_DEB_DEV)
    string(APPEND dev_depends ", ${DLOCK_STORE_${store}_DEB_DEV}")
  endif()
endforeach()
string(REPLACE ";" ", " stores "${DLOCK_STORES_BUILT}")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME dlock)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${DLOCK_DEB_MAINTAINER}")
set(CPACK_STRIP_FILES ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL cli full lib dev)
set(CPACK_DEBIAN_PACKAGE_RELEASE ${DLOCK_DEB_RELEASE})
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_INSTALL_DEFAULT_DIRECTORY_PERMISSIONS
    OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
    WORLD_READ WORLD_EXECUTE)

set(CPACK_DEBIAN_CLI_PACKAGE_SECTION admin)
set(CPACK_COMPONENT_CLI_DESCRIPTION "distributed locks with fencing tokens (command)
The dlock command runs a program under a lock held in a shared store
(${stores}), shows who holds what,
guards files with fencing tokens, and measures itself (chaos, plan,
bench).")
# The stores dlock hands to dlock-full (FULL_ONLY in their declarations).
set(full_stores "")
foreach(store IN LISTS DLOCK_STORES_BUILT)
  if(DLOCK_STORE_${store}_FULL_ONLY)
    list(APPEND full_stores ${store})
  endif()
endforeach()
string(REPLACE ";" ", " full_stores "${full_stores}")
set(CPACK_DEBIAN_CLI_PACKAGE_RECOMMENDS "dlock-full (= ${DLOCK_DEB_VERSION})")
set(CPACK_DEBIAN_FULL_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_FULL_PACKAGE_DEPENDS "dlock (= ${DLOCK_DEB_VERSION})")
set(CPACK_COMPONENT_FULL_DESCRIPTION "distributed locks with fencing tokens (every store)
dlock-full is the dlock command with every store built in. dlock hands
it the stores whose client libraries it does not load itself, to keep
its own start-up short: ${full_stores}.")
set(CPACK_DEBIAN_LIB_PACKAGE_SECTION libs)
# The shlibs file that makes packages built on libdlock depend on this one,
# and the ldconfig trigger Debian's policy asks of a shared library package.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_LIB_PACKAGE_CONTROL_EXTRA ${PROJECT_SOURCE_DIR}/packaging/deb/triggers)
set(CPACK_COMPONENT_LIB_DESCRIPTION "distributed locks with fencing tokens (shared library)
libdlock gives C++ programs one lock API over several stores
(${stores}). Every lock is a lease, and every
grant carries a fencing token that strictly increases per key, with
resource-side guards that reject stale tokens.")
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "${dev_depends}")
set(CPACK_DEBIAN_DEV_PACKAGE_SHLIBDEPS OFF)
set(CPACK_COMPONENT_DEV_DESCRIPTION "distributed locks with fencing tokens (development files)
Headers, the static library, test doubles, and the CMake package
(find_package(dlock)) and pkg-config file (dlock.pc) for building
programs on libdlock.")
include(CPack)
