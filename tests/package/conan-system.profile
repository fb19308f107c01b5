# Use the Debian packages of weft's dependencies instead of building them (Conan 2 platform_requires).
include(default)

[platform_requires]
boost/1.74.0
eigen/3.4.0
onetbb/2021.8.0
openssl/3.0.19
