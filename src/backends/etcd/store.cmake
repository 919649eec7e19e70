# The etcd v3 store, on gRPC 1.51 + protobuf 3.21 from Debian; the etcd API
# subset is compiled from dlock's own .proto files (proto/, CMakeLists.txt).
# Served by dlock-full: gRPC's libraries cost the `dlock` command start-up
# time on every run.
option(DLOCK_WITH_ETCD "Build the etcd v3 backend if gRPC and protobuf are found" ON)
set(etcd_found OFF)
if(DLOCK_WITH_ETCD)
  find_package(Protobuf QUIET)
  find_package(gRPC CONFIG QUIET)
  find_program(DLOCK_GRPC_CPP_PLUGIN grpc_cpp_plugin)
  if(Protobuf_FOUND AND TARGET protobuf::protoc AND gRPC_FOUND AND DLOCK_GRPC_CPP_PLUGIN)
    set(etcd_found ON)
  endif()
endif()
dlock_store(etcd
  TITLE etcd
  FOUND etcd_found
  MISSING "gRPC/protobuf not found (apt-get install libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler)"
  LIBS dlock_etcd_proto
  HEADER backends/etcd/etcd_backend.h
  PACKAGE "find_dependency(OpenSSL)"
  PACKAGE "find_dependency(Protobuf)"
  PACKAGE "find_dependency(gRPC CONFIG)"
  PC_REQUIRES "grpc++ protobuf libcrypto"
  PC_LIBS -ldlock_etcd_proto
  DEB_DEV "libgrpc++-dev, libprotobuf-dev, libssl-dev"
  FULL_ONLY SERVER
  SCHEME etcd "etcd://h1:2379,h2:2379[/prefix]" dlock::etcd::Open
  SCHEME etcds "etcds://[user@]h1:2379,h2:2379[/prefix]?cacert=&cert=&key=" dlock::etcd::Open)
