# Stores are declared once: src/backends/<store>/store.cmake finds the
# store's client library and calls dlock_store(). The top-level
# CMakeLists.txt includes those files in the order of DLOCK_STORES; every
# other CMake file iterates the lists below, and the registry's table of
# schemes is generated from the declarations (dlock_store_table).
# docs/stores.md.
#
# After the declarations:
#   DLOCK_STORES_BUILT         the stores this build has
#   DLOCK_SERVER_STORES_BUILT  those of them whose tests need a server
#   DLOCK_STORE_<store>_LIBS   what tests and benchmarks link to reach the
#                              store's client library directly
#   DLOCK_STORE_<store>_PACKAGE      CMake code dlockConfig.cmake runs to find
#                              the store's libraries for static linking
#   DLOCK_STORE_<store>_PC_REQUIRES  pkg-config modules, and
#   DLOCK_STORE_<store>_PC_LIBS      linker flags, that dlock.pc lists for
#                              static linking
#   DLOCK_STORE_<store>_DEB_DEV      the Debian -dev packages libdlock-dev
#                              depends on for them (cmake/DlockPackaging.cmake)

# dlock_store(<store>
#   TITLE <text>        the store's name in configure messages
#   [FOUND <variable>]  true if the client library was found; without it the
#                       store is always built
#   [MISSING <text>]    what configure says when FOUND is false
#   [LIBS <list>]       see DLOCK_STORE_<store>_LIBS
#   HEADER <path>       declares the factories (relative to src/)
#   [PACKAGE <code>]... installed libdlock.a's dependencies: one line of
#                       CMake, run by dlockConfig.cmake (with
#                       DLOCK_USE_STATIC), that defines an imported target
#                       the store links (docs/install.md)
#   [PC_REQUIRES <modules>]  the same as pkg-config modules ("a b")
#   [PC_LIBS <flags>]   and as linker flags, for libraries without a module
#   [DEB_DEV <packages>]  the same as Debian -dev packages ("a, b")
#   [FULL_ONLY]         served by dlock-full only: the `dlock` command hands
#                       its URIs over (its library costs start-up time)
#   [SERVER]            tests run a server: scripts/servers/<store>.sh, CTest
#                       fixture <store> (tests/servers)
#   SCHEME <scheme> <form> <factory>   a URI scheme, how its URIs look (help
#                       text), and the C++ function that opens it, of type
#                       dlock::internal::StoreFactory
#   REFUSED <scheme> <form> <why>      a scheme dlock knows but never builds
#   ...)
# -DDLOCK_WITH_<STORE>=OFF (an option store.cmake defines) leaves it out.
function(dlock_store store)
  # Parsed by hand: a REFUSED text may hold a ';', which cmake_parse_arguments
  # would split.
  set(full_only OFF)
  set(server OFF)
  set(found_var "")
  set(schemes 0)
  set(value_PACKAGE "")
  set(i 1)
  while(i LESS ARGC)
    set(word "${ARGV${i}}")
    math(EXPR i "${i} + 1")
    if(word STREQUAL "FULL_ONLY")
      set(full_only ON)
    elseif(word STREQUAL "SERVER")
      set(server ON)
    elseif(word STREQUAL "PACKAGE")
      string(APPEND value_PACKAGE "  ${ARGV${i}}\n")
      math(EXPR i "${i} + 1")
    elseif(word MATCHES "^(TITLE|FOUND|MISSING|LIBS|HEADER|PC_REQUIRES|PC_LIBS|DEB_DEV)$")
      set(value_${word} "${ARGV${i}}")
      math(EXPR i "${i} + 1")
    elseif(word MATCHES "^(SCHEME|REFUSED)$")
      math(EXPR j "${i} + 1")
      math(EXPR k "${i} + 2")
      _dlock_cxx_string(scheme "${ARGV${i}}")
      _dlock_cxx_string(form "${ARGV${j}}")
      math(EXPR n "${schemes} + 1")
      set(scheme_${n}_kind ${word})
      set(scheme_${n}_head ".scheme = ${scheme}, .form = ${form}")
      set(scheme_${n}_last "${ARGV${k}}")
      set(schemes ${n})
      math(EXPR i "${i} + 3")
    else()
      message(FATAL_ERROR "dlock_store(${store}): unexpected '${word}'")
    endif()
  endwhile()

  string(TOUPPER ${store} STORE)
  set(built ON)
  set(why_not "")
  if(DEFINED DLOCK_WITH_${STORE} AND NOT DLOCK_WITH_${STORE})
    set(built OFF)
    set(why_not "it was left out with -DDLOCK_WITH_${STORE}=OFF")
  elseif(value_FOUND AND NOT ${value_FOUND})
    set(built OFF)
    set(why_not "its client library was not found when dlock was built")
    message(STATUS "dlock: ${value_TITLE} backend left out: ${value_MISSING}")
  endif()

  # The C++ table entries: for libdlock and dlock-full ("full"), and for the
  # `dlock` command ("lean"), which hands FULL_ONLY stores to dlock-full.
  set(full "")
  set(lean "")
  if(schemes GREATER 0)
    foreach(n RANGE 1 ${schemes})
      set(head "${scheme_${n}_head}")
      if(scheme_${n}_kind STREQUAL "REFUSED" OR NOT built)
        if(scheme_${n}_kind STREQUAL "REFUSED")
          _dlock_cxx_string(why "${scheme_${n}_last}")
        else()
          _dlock_cxx_string(why "${why_not}")
        endif()
        set(entry "    {${head}, .factory = nullptr, .why_not = ${why}},\n")
        string(APPEND full "${entry}")
        string(APPEND lean "${entry}")
      else()
        string(APPEND full "    {${head}, .factory = &${scheme_${n}_last}},\n")
        if(full_only)
          string(APPEND lean "    {${head}, .factory = &HandOverFailed, .served_by_full = true},\n")
        else()
          string(APPEND lean "    {${head}, .factory = &${scheme_${n}_last}},\n")
        endif()
      endif()
    endforeach()
  endif()

  set(DLOCK_STORE_${store}_FULL "${full}" PARENT_SCOPE)
  set(DLOCK_STORE_${store}_LEAN "${lean}" PARENT_SCOPE)
  if(built)
    set(DLOCK_STORE_${store}_HEADER "${value_HEADER}" PARENT_SCOPE)
    set(DLOCK_STORE_${store}_FULL_ONLY ${full_only} PARENT_SCOPE)
    set(DLOCK_STORE_${store}_SERVER ${server} PARENT_SCOPE)
    set(DLOCK_STORE_${store}_LIBS "${value_LIBS}" PARENT_SCOPE)
    set(DLOCK_STORE_${store}_PACKAGE "${value_PACKAGE}" PARENT_SCOPE)
    set(DLOCK_STORE_${store}_PC_REQUIRES "${value_PC_REQUIRES}" PARENT_SCOPE)
    set(DLOCK_STORE_${store}_PC_LIBS "${value_PC_LIBS}" PARENT_SCOPE)
    set(DLOCK_STORE_${store}_DEB_DEV "${value_DEB_DEV}" PARENT_SCOPE)
    list(APPEND DLOCK_STORES_BUILT ${store})
    set(DLOCK_STORES_BUILT "${DLOCK_STORES_BUILT}" PARENT_SCOPE)
    if(server)
      list(APPEND DLOCK_SERVER_STORES_BUILT ${store})
      set(DLOCK_SERVER_STORES_BUILT "${DLOCK_SERVER_STORES_BUILT}" PARENT_SCOPE)
    endif()
  endif()
endfunction()

# dlock_store_table(<output.cc> [LEAN]): writes the registry's table of
# schemes (core/store_table.h), every declared store in DLOCK_STORES order;
# with LEAN, the one for the `dlock` command.
function(dlock_store_table output)
  set(variant FULL)
  if(ARGV1 STREQUAL "LEAN")
    set(variant LEAN)
  endif()
  set(DLOCK_TABLE_INCLUDES "")
  set(DLOCK_TABLE_ENTRIES "")
  foreach(store IN LISTS DLOCK_STORES)
    string(APPEND DLOCK_TABLE_ENTRIES "${DLOCK_STORE_${store}_${variant}}")
    if(store IN_LIST DLOCK_STORES_BUILT AND
       NOT (variant STREQUAL "LEAN" AND DLOCK_STORE_${store}_FULL_ONLY))
      string(APPEND DLOCK_TABLE_INCLUDES "#include \"${DLOCK_STORE_${store}_HEADER}\"\n")
    endif()
  endforeach()
  string(TOLOWER ${variant} DLOCK_TABLE_VARIANT)
  configure_file(${CMAKE_CURRENT_FUNCTION_LIST_DIR}/store_table.cc.in ${output} @ONLY)
endfunction()

# A C++ string literal holding `text`.
function(_dlock_cxx_string out text)
  string(REPLACE "\\" "\\\\" text "${text}")
  string(REPLACE "\"" "\\\"" text "${text}")
  set(${out} "\"${text}\"" PARENT_SCOPE)
endfunction()
