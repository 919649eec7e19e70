# The Redis store (one server, Sentinel, Redis Cluster, Redlock), on hiredis.
option(DLOCK_WITH_REDIS "Build the Redis backend if hiredis is found" ON)
if(DLOCK_WITH_REDIS)
  pkg_check_modules(HIREDIS IMPORTED_TARGET hiredis)
endif()
dlock_store(redis
  TITLE Redis
  FOUND HIREDIS_FOUND
  MISSING "hiredis not found (apt-get install libhiredis-dev)"
  LIBS PkgConfig::HIREDIS
  HEADER backends/redis/redis_backend.h
  PACKAGE "find_dependency(OpenSSL)"
  PACKAGE "pkg_check_modules(HIREDIS REQUIRED QUIET IMPORTED_TARGET hiredis)"
  PC_REQUIRES "hiredis openssl"
  DEB_DEV "libhiredis-dev, libssl-dev"
  SERVER
  SCHEME redis "redis://host:6379/0" dlock::redis::Open
  SCHEME redis+sentinel "redis+sentinel://h1:26379,h2:26379/master" dlock::redis::OpenSentinel
  SCHEME rediss "rediss://user@host:6380/0?cacert=ca.pem&cert=c.pem&key=c.key" dlock::redis::Open
  SCHEME rediss+sentinel "rediss+sentinel://user@h1:26379,h2/master?cacert=ca.pem" dlock::redis::OpenSentinel
  SCHEME redis+cluster "redis+cluster://h1:6379,h2:6379,h3:6379" dlock::redis::OpenCluster
  SCHEME rediss+cluster "rediss+cluster://user@h1:6379,h2/?cacert=ca.pem" dlock::redis::OpenCluster
  SCHEME redlock "redlock://h1:6379,h2:6379,h3:6379" dlock::redis::OpenRedlock)
