# Which third-party packages each weft module needs. This table is the single source of truth:
# the build, the installed weftConfig.cmake (find_dependency per requested component), Conan and
# vcpkg all follow it.
#
#   module  packages                         why
#   core    -                                standard library only
#   kv      OpenSSL (libcrypto)              SHA-256 prefix-cache keys (core/crypto.hpp); the rest is std only
#   sched   -                                standard library only (uses weft::kv)
#   moe     -                                standard library only
#   comm    Threads, Boost (Asio, Graph),    elastic coordinator, ring planning, HMAC-SHA256 connection
#           OpenSSL (libcrypto)              authentication (core/crypto.hpp); MPI optional; libssl only
#                                            for TLS (comm/tls.hpp): its users link OpenSSL::SSL themselves
#   coding  Eigen3                           decoders solve small dense systems
#   quant   Threads, TBB                     multi-threaded CPU kernels (CUDA optional)
set(WEFT_MODULES core kv sched comm coding quant moe)

set(WEFT_DEPS_core "")
set(WEFT_DEPS_kv "OpenSSL::Crypto")
set(WEFT_DEPS_sched "")
set(WEFT_DEPS_moe "")
set(WEFT_DEPS_comm "Threads::Threads;Boost::headers;OpenSSL::Crypto")
set(WEFT_DEPS_coding "Eigen3::Eigen")
set(WEFT_DEPS_quant "Threads::Threads;TBB::tbb")

# find_package calls that satisfy the imported targets above (also written into weftConfig.cmake).
set(WEFT_FIND_Threads::Threads "Threads")
set(WEFT_FIND_Boost::headers "Boost 1.74")
set(WEFT_FIND_Eigen3::Eigen "Eigen3 3.3 NO_MODULE")
set(WEFT_FIND_TBB::tbb "TBB")
set(WEFT_FIND_OpenSSL::Crypto "OpenSSL 3.0 COMPONENTS Crypto")

macro(weft_find_module_dependencies)
  find_package(Threads)
  find_package(Boost 1.74 QUIET)
  find_package(Eigen3 3.3 QUIET NO_MODULE)
  find_package(TBB QUIET)
  find_package(OpenSSL 3.0 QUIET COMPONENTS Crypto)
  find_package(MPI QUIET COMPONENTS CXX)
endmacro()
