# The ZooKeeper store, on the multi-threaded C client (which has no
# pkg-config file).
option(DLOCK_WITH_ZOOKEEPER "Build the ZooKeeper backend if the C client is found" ON)
set(zookeeper_found OFF)
if(DLOCK_WITH_ZOOKEEPER)
  find_path(ZOOKEEPER_INCLUDE_DIR zookeeper/zookeeper.h)
  find_library(ZOOKEEPER_MT_LIB NAMES zookeeper_mt)
  if(ZOOKEEPER_INCLUDE_DIR AND ZOOKEEPER_MT_LIB)
    set(zookeeper_found ON)
    add_library(dlock_zookeeper_mt INTERFACE)
    target_include_directories(dlock_zookeeper_mt INTERFACE ${ZOOKEEPER_INCLUDE_DIR})
    target_link_libraries(dlock_zookeeper_mt INTERFACE ${ZOOKEEPER_MT_LIB} Threads::Threads)
  endif()
endif()
dlock_store(zookeeper
  TITLE ZooKeeper
  FOUND zookeeper_found
  MISSING "the multi-threaded C client was not found (apt-get install libzookeeper-mt-dev)"
  LIBS dlock_zookeeper_mt
  HEADER backends/zookeeper/zookeeper_backend.h
  PC_LIBS -lzookeeper_mt
  DEB_DEV libzookeeper-mt-dev
  SERVER
  SCHEME zk "zk://h1:2181,h2:2181/chroot" dlock::zookeeper::Open
  REFUSED zks "zks://h1:2281/chroot"
          "TLS is not supported: Debian's ZooKeeper C client (3.8) has no TLS; see docs/backend-zookeeper.md, Secured")
