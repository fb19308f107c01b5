#!/usr/bin/env python3
"""No document cites a file the repository does not contain.

Usage: check_doc_paths.py <repo root>
       check_doc_paths.py --self-test   (a tree with one good and three bad citations must fail on
                                         exactly those three)

Scans README.md, CHANGELOG.md, docs/*.md and any other tracked-looking *.md outside build trees for
  - Markdown links [text](target) to local files,
  - `code spans` that name a file or a folder of the repository (by extension or top-level folder),
  - bare words that name a Markdown file (e.g. SOMETHING.md),
and fails, listing file:line and the citation, for every one that resolves to nothing.

A citation resolves when it exists relative to the citing document, to the repository root, to
include/ or include/weft/, or to include/weft/<module>/ for docs/<module>.md; a bare file name also
resolves when a file of that name exists anywhere in the repository. Outputs that programs write
(.csv/.png/.log, build/ and bench-results/ paths) and placeholders (<...>, *, {...}) are not citations
of repository files and are skipped. Any mention of a path outside the checkout (../shared) fails.
"""
import os
import re
import sys

EXTENSIONS = ("hpp", "cpp", "cuh", "cu", "h", "md", "sh", "py", "cmake", "json", "txt", "in", "profile")
TOP_DIRS = ("include/", "examples/", "tests/", "bench/", "docs/", "cmake/", "ports/", "data/", "scripts/",
            "test_package/", ".ci/")
OUTPUT_EXTENSIONS = (".csv", ".png", ".log", ".svg")
SKIP_DIRS = {".git", "build", "node_modules", "__pycache__", "out"}

LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
BARE_MD = re.compile(r"(?<![\w/.-])([A-Za-z0-9_][\w./-]*\.md)\b")
PATHLIKE = re.compile(r"^[\w./+-]+$")


def repo_files(root):
    names = set()
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS]
        for f in files:
            names.add(f)
    return names


def candidates(root, doc, target):
    doc_dir = os.path.dirname(doc)
    yield os.path.join(doc_dir, target)
    yield os.path.join(root, target)
    yield os.path.join(root, "include", target)
    yield os.path.join(root, "include", "weft", target)
    base = os.path.basename(doc)
    if os.path.basename(doc_dir) == "docs" and base.endswith(".md"):
        module = base[:-3].split("-")[0]
        yield os.path.join(root, "include", "weft", module, target)


def resolves(root, doc, target, basenames):
    target = target.split("#", 1)[0].rstrip("/")
    if not target:
        return True
    for c in candidates(root, doc, target):
        if os.path.exists(c) or os.path.exists(c + ".in"):
            return True
    if "/" not in target and (target in basenames or target + ".in" in basenames):
        return True
    return False


EXTERNAL = re.compile(r"github\.com/|gitlab\.com/|://|\bartifact\b|\bupstream\b", re.IGNORECASE)


def external_paragraphs(lines):
    """Per line: whether its paragraph names another repository (a URL, github.com/..., a paper's
    artifact); a path there that does not resolve here is that repository's file, not a missing one."""
    flags = [False] * len(lines)
    start = 0
    for i in range(len(lines) + 1):
        if i == len(lines) or not lines[i].strip():
            ext = any(EXTERNAL.search(lines[j]) for j in range(start, i))
            for j in range(start, i):
                flags[j] = ext
            start = i + 1
    return flags


def is_file_citation(span):
    if not PATHLIKE.match(span):
        return False
    if span.startswith(("build/", "http://", "https://")) or "bench-results" in span:
        return False
    if span.endswith(OUTPUT_EXTENSIONS) and not span.startswith("data/"):
        return False
    if any(span.startswith(d) for d in TOP_DIRS):
        return True
    ext = span.rsplit(".", 1)[-1] if "." in os.path.basename(span) else ""
    return ext in EXTENSIONS and not span.startswith(".")


def documents(root):
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS and not x.startswith(".")]
        for f in files:
            if f.endswith(".md"):
                yield os.path.join(d, f)


def self_test():
    import tempfile
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "docs"))
        os.makedirs(os.path.join(root, "include", "weft", "kv"))
        open(os.path.join(root, "include", "weft", "kv", "block_pool.hpp"), "w").close()
        with open(os.path.join(root, "docs", "kv.md"), "w") as f:
            f.write("Good: `block_pool.hpp`, `kv/block_pool.hpp`, [pool](../include/weft/kv/block_pool.hpp).\n"
                    "Bad: `kv/block_poll.hpp`, see RULES.md and [x](missing.md).\n\n"
                    "Upstream's `tools/gen.py` (github.com/someone/else) is not ours.\n")
        problems = check(root)
    expected = ["kv/block_poll.hpp", "missing.md", "RULES.md"]
    ok = len(problems) == 3 and all(any(e in p for p in problems) for e in expected)
    print("\n".join(problems))
    print("self-test:", "passed" if ok else "FAILED")
    return 0 if ok else 1


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
    problems = check(root)
    for p in problems:
        print(p)
    return 1 if problems else 0


def check(root):
    basenames = repo_files(root)
    problems = []
    checked = 0
    for doc in sorted(documents(root)):
        rel_doc = os.path.relpath(doc, root)
        in_fence = False
        with open(doc, encoding="utf-8") as f:
            lines = f.readlines()
        external = external_paragraphs(lines)
        if True:
            for number, line in enumerate(lines, 1):
                if line.lstrip().startswith("```"):
                    in_fence = not in_fence
                    continue
                cited = []
                if "../shared" in line or "/work/shared" in line:
                    problems.append(f"{rel_doc}:{number}: cites a path outside the repository (../shared)")
                for m in LINK.finditer(line):
                    t = m.group(1)
                    if not re.match(r"^[a-z]+:", t) and not t.startswith("#"):
                        cited.append(t)
                if not in_fence:
                    for m in CODE_SPAN.finditer(line):
                        span = m.group(1).strip()
                        if is_file_citation(span):
                            cited.append(span)
                    text = CODE_SPAN.sub("", LINK.sub("", line))
                    cited += [m.group(1) for m in BARE_MD.finditer(text)]
                for t in cited:
                    if any(ch in t for ch in "<>*{}$"):
                        continue
                    checked += 1
                    if not resolves(root, doc, t, basenames) and not external[number - 1]:
                        problems.append(f"{rel_doc}:{number}: cites '{t}', which the repository does not contain")
    print(f"doc paths: {checked} citations checked, {len(problems)} missing")
    return problems


if __name__ == "__main__":
    sys.exit(main())
