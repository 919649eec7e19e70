# The SQLite store, the default: always built (the top-level CMakeLists.txt
# finds SQLite itself, which libdlock needs for its fences too).
dlock_store(sqlite
  TITLE SQLite
  LIBS dlock_sqlite3
  HEADER backends/sqlite/sqlite_open.h
  PACKAGE "pkg_check_modules(SQLITE3 REQUIRED QUIET IMPORTED_TARGET sqlite3)"
  PC_REQUIRES sqlite3
  DEB_DEV libsqlite3-dev
  SCHEME sqlite "sqlite:///path/locks.db" dlock::sqlite::Open)
