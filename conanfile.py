# Conan 2 recipe for weft, a header-only library. Each module's third-party dependency is an option
# so a user who wants only kv/sched pulls in nothing:
#   conan create . -o "weft/*:with_comm=False" -o "weft/*:with_coding=False" -o "weft/*:with_quant=False"
import os

from conan import ConanFile
from conan.tools.cmake import CMake, CMakeToolchain, cmake_layout
from conan.tools.files import copy, load
import re


class WeftConan(ConanFile):
    name = "weft"
    description = "Scheduling and communication algorithms for ML engines (collectives, KV cache, schedulers, MoE, quantized GEMM)"
    license = "MIT"
    url = "https://github.com/weft-ml/weft"
    homepage = "https://github.com/weft-ml/weft"
    topics = ("collectives", "allreduce", "kv-cache", "llm-serving", "scheduling", "moe", "quantization", "header-only")
    package_type = "header-library"
    settings = "os", "arch", "compiler", "build_type"
    options = {
        "with_comm": [True, False],    # Boost (Asio, Graph)
        "with_coding": [True, False],  # Eigen
        "with_quant": [True, False],   # oneTBB
    }
    default_options = {"with_comm": True, "with_coding": True, "with_quant": True}
    exports_sources = "CMakeLists.txt", "cmake/*", "include/*", "LICENSE"
    no_copy_source = True

    def set_version(self):
        config = load(self, os.path.join(self.recipe_folder, "include", "weft", "core", "config.hpp"))
        self.version = re.search(r'#define WEFT_VERSION_STRING "([^"]+)"', config).group(1)

    def layout(self):
        cmake_layout(self)

    def requirements(self):
        # SHA-256 prefix-cache keys (kv) and HMAC connection authentication (comm): core/crypto.hpp.
        self.requires("openssl/[>=3.0 <4]", transitive_headers=True)
        if self.options.with_comm:
            self.requires("boost/1.74.0", transitive_headers=True)
        if self.options.with_coding:
            self.requires("eigen/3.4.0", transitive_headers=True)
        if self.options.with_quant:
            self.requires("onetbb/2021.8.0", transitive_headers=True)

    def validate(self):
        from conan.tools.build import check_min_cppstd
        check_min_cppstd(self, 20)

    def package(self):
        copy(self, "LICENSE", self.source_folder, os.path.join(self.package_folder, "licenses"))
        copy(self, "*.hpp", os.path.join(self.source_folder, "include"), os.path.join(self.package_folder, "include"))
        copy(self, "*.cuh", os.path.join(self.source_folder, "include"), os.path.join(self.package_folder, "include"))

    def package_id(self):
        self.info.clear()

    def package_info(self):
        self.cpp_info.bindirs = []
        self.cpp_info.libdirs = []
        self.cpp_info.set_property("cmake_file_name", "weft")
        self.cpp_info.set_property("cmake_target_name", "weft::weft")
        # A dependency satisfied by the system ([platform_requires]) has no Conan package to point
        # at; weft's component then relies on the consumer's own find_package (as with the
        # installed weftConfig.cmake).
        packaged = {dep.ref.name for dep in self.dependencies.host.values() if dep.package_folder}
        def needs(*deps):
            return ["core"] + [d for d in deps if d.split("::")[0] in packaged]
        modules = {"core": [], "kv": needs("openssl::crypto"), "sched": ["core", "kv"], "moe": ["core"]}
        if self.options.with_comm:
            modules["comm"] = needs("boost::headers", "openssl::crypto")
        if self.options.with_coding:
            modules["coding"] = needs("eigen::eigen")
        if self.options.with_quant:
            modules["quant"] = needs("onetbb::onetbb")
        for name, requires in modules.items():
            component = self.cpp_info.components[name]
            component.set_property("cmake_target_name", f"weft::{name}")
            component.bindirs = []
            component.libdirs = []
            component.requires = requires
            if name in ("comm", "quant") and self.settings.os == "Linux":
                component.system_libs = ["pthread", "rt"]
