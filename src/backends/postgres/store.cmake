# The PostgreSQL store, on libpq. Served by dlock-full: libpq's Kerberos,
# LDAP and TLS libraries cost the `dlock` command start-up time on every run.
option(DLOCK_WITH_POSTGRES "Build the PostgreSQL backend if libpq is found" ON)
if(DLOCK_WITH_POSTGRES)
  pkg_check_modules(LIBPQ IMPORTED_TARGET libpq)
endif()
dlock_store(postgres
  TITLE PostgreSQL
  FOUND LIBPQ_FOUND
  MISSING "libpq not found (apt-get install libpq-dev)"
  LIBS PkgConfig::LIBPQ
  HEADER backends/postgres/postgres_backend.h
  PACKAGE "pkg_check_modules(LIBPQ REQUIRED QUIET IMPORTED_TARGET libpq)"
  PC_REQUIRES libpq
  DEB_DEV libpq-dev
  FULL_ONLY SERVER
  SCHEME postgres "postgres://user@host:5432/db" dlock::postgres::Open
  SCHEME postgresql "postgresql://user@host:5432/db" dlock::postgres::Open)
