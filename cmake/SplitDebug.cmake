# Run by `cmake --install` after the binaries are copied (src/cli): strips
# each of DLOCK_SPLIT_BINARIES in <prefix>/bin and keeps its debug information
# in <prefix>/lib/debug/<prefix>/bin/<name>.debug, linked from the binary by
# .gnu_debuglink. That is where gdb looks under its debug-file-directory: at
# once for the prefix /usr, else after
#   gdb -iex 'set debug-file-directory <prefix>/lib/debug' <prefix>/bin/dlock
# A binary with no debug information (already stripped, a Release build) is
# left as it is.
set(bin_dir "$ENV{DESTDIR}${CMAKE_INSTALL_PREFIX}/bin")
set(debug_dir "$ENV{DESTDIR}${CMAKE_INSTALL_PREFIX}/lib/debug${CMAKE_INSTALL_PREFIX}/bin")
foreach(name IN LISTS DLOCK_SPLIT_BINARIES)
  set(exe "${bin_dir}/${name}")
  execute_process(COMMAND "${DLOCK_READELF}" -S --wide "${exe}"
                  OUTPUT_VARIABLE sections COMMAND_ERROR_IS_FATAL ANY)
  if(NOT sections MATCHES "\\.debug_info")
    continue()
  endif()
  file(MAKE_DIRECTORY "${debug_dir}")
  message(STATUS "Splitting debug information: ${debug_dir}/${name}.debug")
  execute_process(COMMAND "${DLOCK_OBJCOPY}" --only-keep-debug "${exe}" "${debug_dir}/${name}.debug"
                  COMMAND_ERROR_IS_FATAL ANY)
  file(CHMOD "${debug_dir}/${name}.debug" PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
  execute_process(COMMAND "${DLOCK_OBJCOPY}" --strip-all
                          "--add-gnu-debuglink=${debug_dir}/${name}.debug" "${exe}"
                  COMMAND_ERROR_IS_FATAL ANY)
endforeach()
