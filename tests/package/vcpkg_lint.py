#!/usr/bin/env python3
"""Lint of weft's vcpkg files, which no CI machine can run (there is no vcpkg there).

Usage: vcpkg_lint.py <repo root>
       vcpkg_lint.py --self-test     (broken copies of the files must each be reported)

Checks, for vcpkg.json (the development manifest) and ports/weft/vcpkg.json (the port):
  - only fields of vcpkg's manifest schema (https://learn.microsoft.com/vcpkg/reference/vcpkg-json),
    a valid port name, exactly one version field, features with a description, default-features
    that exist, dependencies as names or objects with known fields, and only ports weft expects;
  - the port's version is the project's version, its features are weft modules;
and for ports/weft/portfile.cmake:
  - it calls only CMake commands and known vcpkg helpers, and the helper ports it uses
    (vcpkg-cmake, vcpkg-cmake-config) are host dependencies of the port;
  - every -DWEFT_... option it passes exists in CMakeLists.txt, and the CONFIG_PATH it fixes up is
    where weft installs its package config (WEFT_INSTALL_CMAKEDIR).
"""
import json
import os
import re
import shutil
import sys
import tempfile

MANIFEST_FIELDS = {
    "name", "version", "version-semver", "version-date", "version-string", "port-version", "maintainers",
    "summary", "description", "homepage", "documentation", "license", "supports", "dependencies",
    "default-features", "features", "builtin-baseline", "overrides", "vcpkg-configuration",
}
VERSION_FIELDS = {"version", "version-semver", "version-date", "version-string"}
DEPENDENCY_FIELDS = {"name", "host", "features", "default-features", "platform", "version>="}
FEATURE_FIELDS = {"description", "dependencies", "supports", "license"}
CONFIGURATION_FIELDS = {"default-registry", "registries", "overlay-ports", "overlay-triplets"}
# The vcpkg ports weft's manifests may name (all exist in the vcpkg registry).
KNOWN_PORTS = {"vcpkg-cmake", "vcpkg-cmake-config", "boost-asio", "boost-graph", "eigen3", "openssl", "tbb",
               "range-v3", "benchmark", "catch2", "gloo", "openmpi", "onednn", "weft"}
VCPKG_HELPERS = {
    "vcpkg_cmake_configure", "vcpkg_cmake_install", "vcpkg_cmake_build", "vcpkg_cmake_config_fixup",
    "vcpkg_install_copyright", "vcpkg_from_github", "vcpkg_from_git", "vcpkg_check_features",
    "vcpkg_copy_pdbs", "vcpkg_fixup_pkgconfig", "vcpkg_replace_string", "vcpkg_download_distfile",
    "vcpkg_extract_source_archive", "vcpkg_cmake_get_vars",
}
CMAKE_COMMANDS = {
    "set", "unset", "if", "elseif", "else", "endif", "foreach", "endforeach", "while", "endwhile",
    "file", "get_filename_component", "message", "list", "string", "configure_file", "cmake_path",
    "include", "math", "function", "endfunction", "macro", "endmacro", "return",
}
HELPER_PORTS = {"vcpkg_cmake_": "vcpkg-cmake", "vcpkg_cmake_config_fixup": "vcpkg-cmake-config"}
NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


def lint_manifest(path, problems, is_port):
    rel = path
    try:
        data = json.load(open(path))
    except (OSError, ValueError) as e:
        problems.append(f"{rel}: not valid JSON: {e}")
        return {}
    for key in data:
        if key not in MANIFEST_FIELDS and not key.startswith("$"):
            problems.append(f"{rel}: '{key}' is not a field of vcpkg.json")
    if "name" not in data or not NAME.match(str(data.get("name", ""))):
        problems.append(f"{rel}: 'name' must be lowercase letters, digits and hyphens")
    versions = VERSION_FIELDS & set(data)
    if len(versions) != 1:
        problems.append(f"{rel}: exactly one of {sorted(VERSION_FIELDS)} expected, found {sorted(versions)}")
    features = data.get("features", {})
    if not isinstance(features, dict):
        problems.append(f"{rel}: 'features' must be an object")
        features = {}
    for fname, feature in features.items():
        if not NAME.match(fname) or fname in ("core", "default"):
            problems.append(f"{rel}: feature name '{fname}' is not allowed")
        if not isinstance(feature, dict) or "description" not in feature:
            problems.append(f"{rel}: feature '{fname}' needs a description")
            continue
        for key in feature:
            if key not in FEATURE_FIELDS and not key.startswith("$"):
                problems.append(f"{rel}: feature '{fname}': '{key}' is not a feature field")
        lint_dependencies(rel, f"feature '{fname}'", feature.get("dependencies", []), problems)
    for d in data.get("default-features", []):
        name = d["name"] if isinstance(d, dict) else d
        if name not in features:
            problems.append(f"{rel}: default feature '{name}' is not declared in 'features'")
    lint_dependencies(rel, "dependencies", data.get("dependencies", []), problems)
    configuration = data.get("vcpkg-configuration", {})
    for key in configuration:
        if key not in CONFIGURATION_FIELDS and not key.startswith("$"):
            problems.append(f"{rel}: vcpkg-configuration: '{key}' is not a configuration field")
    if is_port and "license" not in data:
        problems.append(f"{rel}: a port should state its license (SPDX)")
    return data


def lint_dependencies(rel, where, deps, problems):
    if not isinstance(deps, list):
        problems.append(f"{rel}: {where} must be a list")
        return
    for d in deps:
        if isinstance(d, str):
            name = d
        elif isinstance(d, dict):
            name = d.get("name", "")
            for key in d:
                if key not in DEPENDENCY_FIELDS and not key.startswith("$"):
                    problems.append(f"{rel}: {where}: dependency '{name}': '{key}' is not a dependency field")
        else:
            problems.append(f"{rel}: {where}: a dependency must be a name or an object")
            continue
        if name not in KNOWN_PORTS:
            problems.append(f"{rel}: {where}: '{name}' is not a port weft expects (typo?)")


def host_dependencies(manifest):
    return {d["name"] for d in manifest.get("dependencies", []) if isinstance(d, dict) and d.get("host")}


def lint_portfile(root, path, manifest, problems):
    text = open(path).read()
    code = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
    for m in re.finditer(r"(?m)^\s*([A-Za-z_][A-Za-z0-9_]*)\s*\(", code):
        cmd = m.group(1)
        if cmd.lower() in CMAKE_COMMANDS:
            continue
        if cmd not in VCPKG_HELPERS:
            problems.append(f"{path}: calls '{cmd}', which is not a CMake command or a known vcpkg helper")
            continue
        for prefix, port in HELPER_PORTS.items():
            if cmd.startswith(prefix) and port not in host_dependencies(manifest):
                problems.append(f"{path}: '{cmd}' needs the host dependency '{port}' in ports/weft/vcpkg.json")
    cmakelists = open(os.path.join(root, "CMakeLists.txt")).read()
    cmake_dir = os.path.join(root, "cmake")
    options = set(re.findall(r"option\((WEFT_[A-Z_]+)", cmakelists))
    options |= set(re.findall(r"set\((WEFT_[A-Z_]+) [^)]*CACHE", cmakelists))
    for f in os.listdir(cmake_dir):
        if f.endswith(".cmake"):
            body = open(os.path.join(cmake_dir, f)).read()
            options |= set(re.findall(r"option\((WEFT_[A-Z_]+)", body))
            options |= set(re.findall(r"set\((WEFT_[A-Z_]+) [^)]*CACHE", body))
    for opt in re.findall(r"-D(WEFT_[A-Z_]+)=", code):
        if opt not in options:
            problems.append(f"{path}: passes -D{opt}, which weft's CMake does not define")
    fixup = re.search(r"CONFIG_PATH\s+(\S+)\)?", code)
    install = open(os.path.join(cmake_dir, "WeftInstall.cmake")).read()
    m = re.search(r'set\(WEFT_INSTALL_CMAKEDIR "\$\{CMAKE_INSTALL_DATADIR\}/([^"]+)"', install)
    if fixup and m and fixup.group(1).rstrip(")") != "share/" + m.group(1):
        problems.append(f"{path}: CONFIG_PATH {fixup.group(1)} is not where weft installs its config "
                        f"(share/{m.group(1)})")


def lint(root):
    problems = []
    lint_manifest(os.path.join(root, "vcpkg.json"), problems, is_port=False)
    port_json = os.path.join(root, "ports", "weft", "vcpkg.json")
    port = lint_manifest(port_json, problems, is_port=True)
    config = open(os.path.join(root, "include", "weft", "core", "config.hpp")).read()
    version = re.search(r'#define WEFT_VERSION_STRING "([^"]+)"', config).group(1)
    port_version = port.get("version-semver") or port.get("version")
    if port_version != version:
        problems.append(f"{port_json}: version {port_version} is not weft's version {version}")
    modules = re.search(r"set\(WEFT_MODULES ([^)]+)\)", open(os.path.join(root, "cmake", "WeftDependencies.cmake")).read())
    module_names = set(modules.group(1).split()) if modules else set()
    for fname in port.get("features", {}):
        if fname not in module_names:
            problems.append(f"{port_json}: feature '{fname}' is not a weft module ({sorted(module_names)})")
    lint_portfile(root, os.path.join(root, "ports", "weft", "portfile.cmake"), port, problems)
    return problems


def self_test(root):
    breakages = [
        ("ports/weft/vcpkg.json", '"homepage"', '"home-page"', "'home-page' is not a field"),
        ("ports/weft/vcpkg.json", '"default-features": ["comm"', '"default-features": ["comms"', "default feature 'comms'"),
        ("ports/weft/vcpkg.json", '"eigen3"', '"eigen"', "'eigen' is not a port"),
        ("ports/weft/portfile.cmake", "vcpkg_cmake_install()", "vcpkg_install_cmake()", "'vcpkg_install_cmake'"),
        ("ports/weft/portfile.cmake", "-DWEFT_BUILD_TESTS=OFF", "-DWEFT_BUILD_TEST=OFF", "-DWEFT_BUILD_TEST,"),
    ]
    failed = 0
    for rel, old, new, expected in breakages:
        with tempfile.TemporaryDirectory() as tmp:
            for sub in ("ports", "cmake", "include"):
                shutil.copytree(os.path.join(root, sub), os.path.join(tmp, sub))
            for f in ("vcpkg.json", "CMakeLists.txt"):
                shutil.copy(os.path.join(root, f), tmp)
            target = os.path.join(tmp, rel)
            text = open(target).read()
            if old not in text:
                print(f"self-test: '{old}' not found in {rel}; update the self-test")
                failed += 1
                continue
            open(target, "w").write(text.replace(old, new, 1))
            problems = lint(tmp)
            if not any(expected.rstrip(",") in p for p in problems):
                print(f"self-test: breaking {rel} ({old} -> {new}) was not reported: {problems}")
                failed += 1
    print("self-test:", "passed" if failed == 0 else f"{failed} FAILED")
    return 1 if failed else 0


def main():
    if sys.argv[1:2] == ["--self-test"]:
        root = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..", ".."))
        return self_test(root)
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
    problems = lint(root)
    for p in problems:
        print(p)
    print(f"vcpkg lint: vcpkg.json, ports/weft/vcpkg.json, ports/weft/portfile.cmake: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
