# The MariaDB store (MySQL-protocol servers: MariaDB 10.6 or later), on
# MariaDB Connector/C (libmariadb).
option(DLOCK_WITH_MARIADB "Build the MariaDB backend if libmariadb is found" ON)
if(DLOCK_WITH_MARIADB)
  pkg_check_modules(LIBMARIADB IMPORTED_TARGET libmariadb)
endif()
dlock_store(mariadb
  TITLE MariaDB
  FOUND LIBMARIADB_FOUND
  MISSING "libmariadb not found (apt-get install libmariadb-dev)"
  LIBS PkgConfig::LIBMARIADB
  HEADER backends/mariadb/mariadb_backend.h
  PACKAGE "pkg_check_modules(LIBMARIADB REQUIRED QUIET IMPORTED_TARGET libmariadb)"
  PC_REQUIRES libmariadb
  DEB_DEV libmariadb-dev
  SERVER
  SCHEME mysql "mysql://user@host:3306/db" dlock::mariadb::Open
  SCHEME mariadb "mariadb://user@host:3306/db" dlock::mariadb::Open)
