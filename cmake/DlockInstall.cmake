# `cmake --install`: the public headers, libdlock (shared and static), the
# test doubles (libdlock_testing.a), the CMake package (dlockConfig.cmake:
# targets dlock::dlock, dlock::dlock_static, dlock::testing, and one
# component per store this build has) and dlock.pc; the command's man pages
# and bash completion. docs/install.md.
include(CMakePackageConfigHelpers)
set(DLOCK_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/dlock)

# Headers; a store's fence header only when the store is built.
set(left_out "")
foreach(store IN LISTS DLOCK_STORES)
  if(NOT store IN_LIST DLOCK_STORES_BUILT)
    list(APPEND left_out PATTERN "fence_${store}.h" EXCLUDE)
  endif()
endforeach()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/dlock
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev ${left_out})
install(FILES ${PROJECT_BINARY_DIR}/include/dlock/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/dlock COMPONENT dev)

# The static library's link dependencies that are targets of this build
# (SQLite's and ZooKeeper's interface targets, the etcd API's archive) go
# into the export with it; imported ones are found again by the config.
set(dlock_link_targets "")
get_target_property(dlock_libs dlock LINK_LIBRARIES)
foreach(lib IN LISTS dlock_libs)
  if(TARGET ${lib})
    get_target_property(imported ${lib} IMPORTED)
    if(NOT imported)
      list(APPEND dlock_link_targets ${lib})
    endif()
  endif()
endforeach()

install(TARGETS dlock dlock_shared dlock_testing ${dlock_link_targets}
        EXPORT dlockTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT lib
                NAMELINK_COMPONENT dev)
install(EXPORT dlockTargets NAMESPACE dlock:: DESTINATION ${DLOCK_CMAKE_DIR}
        COMPONENT dev)

# What the config and dlock.pc say about each store built.
set(DLOCK_CONFIG_STATIC_DEPS "")
set(DLOCK_PC_REQUIRES "")
set(DLOCK_PC_LIBS "")
foreach(store IN LISTS DLOCK_STORES_BUILT)
  string(APPEND DLOCK_CONFIG_STATIC_DEPS "${DLOCK_STORE_${store}_PACKAGE}")
  string(APPEND DLOCK_PC_REQUIRES " ${DLOCK_STORE_${store}_PC_REQUIRES}")
  string(APPEND DLOCK_PC_LIBS " ${DLOCK_STORE_${store}_PC_LIBS}")
endforeach()
foreach(var DLOCK_PC_REQUIRES DLOCK_PC_LIBS)
  string(REGEX REPLACE "  +" " " ${var} "${${var}}")
  string(STRIP "${${var}}" ${var})
endforeach()

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/dlockConfig.cmake.in
  ${PROJECT_BINARY_DIR}/dlockConfig.cmake INSTALL_DESTINATION ${DLOCK_CMAKE_DIR})
# The ABI promise of docs/install.md: while the major version is 0 a minor
# release may break it (and changes the SONAME), so only the same minor
# version is compatible; from 1.0 on, the same major version.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(compatibility SameMinorVersion)
else()
  set(compatibility SameMajorVersion)
endif()
write_basic_package_version_file(${PROJECT_BINARY_DIR}/dlockConfigVersion.cmake
  COMPATIBILITY ${compatibility})
install(FILES ${PROJECT_BINARY_DIR}/dlockConfig.cmake
              ${PROJECT_BINARY_DIR}/dlockConfigVersion.cmake
        DESTINATION ${DLOCK_CMAKE_DIR} COMPONENT dev)

# dlock.pc finds its prefix from where it is installed (${pcfiledir}), so
# `cmake --install --prefix` anywhere gives a working file.
file(RELATIVE_PATH DLOCK_PC_TO_PREFIX /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
string(REGEX REPLACE "/$" "" DLOCK_PC_TO_PREFIX "${DLOCK_PC_TO_PREFIX}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/dlock.pc.in ${PROJECT_BINARY_DIR}/dlock.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/dlock.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)

# The man pages (help2man) and bash completion, generated from the command's
# own --help after it is linked, so they cannot drift from it. Not in
# sanitizer builds, which are not installed.
if(NOT DLOCK_SANITIZE)
  set(completion ${PROJECT_BINARY_DIR}/share/bash-completion/completions/dlock)
  add_custom_command(OUTPUT ${completion}
    COMMAND bash ${PROJECT_SOURCE_DIR}/cmake/dlock_completion.sh $<TARGET_FILE:dlock_cli> ${completion}
    DEPENDS dlock_cli ${PROJECT_SOURCE_DIR}/cmake/dlock_completion.sh
    COMMENT "bash completion for dlock" VERBATIM)
  set(DLOCK_DOCS ${completion})
  install(FILES ${completion} DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions
          COMPONENT cli)
  find_program(DLOCK_HELP2MAN help2man)
  if(DLOCK_HELP2MAN)
    set(man_dir ${PROJECT_BINARY_DIR}/share/man/man1)
    set(installed_man_dir ${PROJECT_BINARY_DIR}/share/man-installed/man1)
    add_custom_command(OUTPUT ${man_dir}/dlock.1
      COMMAND bash ${PROJECT_SOURCE_DIR}/cmake/dlock_man.sh $<TARGET_FILE:dlock_cli> ${man_dir}
              ${installed_man_dir}
      DEPENDS dlock_cli ${PROJECT_SOURCE_DIR}/cmake/dlock_man.sh
      COMMENT "man pages for dlock" VERBATIM)
    list(APPEND DLOCK_DOCS ${man_dir}/dlock.1)
    install(DIRECTORY ${installed_man_dir} DESTINATION ${CMAKE_INSTALL_MANDIR} COMPONENT cli
            PATTERN dlock-full.1.gz EXCLUDE)
    install(FILES ${installed_man_dir}/dlock-full.1.gz
            DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT full)
  else()
    message(STATUS "dlock: man pages left out: help2man not found (apt-get install help2man)")
  endif()
  add_custom_target(dlock_docs ALL DEPENDS ${DLOCK_DOCS})
endif()
