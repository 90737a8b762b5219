#!/usr/bin/env python3
"""Checks that the include graph between GraphPipe's modules runs only downwards.

Every product source file belongs to one module (by its folder, MODULES below); every quoted
#include is resolved to the file it names and so to that file's module. A module may include its
own headers and those of the modules it is declared to depend on (LAYERS, directly or through
them); anything else is an arrow running back up, or sideways between modules that must not know
each other (the planner and the executor), and fails the check. Tests, benchmarks and tools may
include anything and are not checked.

  scripts/check-layering.py            check; exit 1 naming every offending include
  scripts/check-layering.py --graph    print the module graph the sources actually have
  scripts/check-layering.py --self-test  also check that planted upward includes are caught
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Module of a path: the first matching prefix wins (public executor headers are listed one by
# one: they live together in include/gp/exec/ but belong to the module that defines them).
MODULES = [
    ("common/", "common"),
    ("proto/", "proto"),
    ("model/", "model"),
    ("plan/", "plan"),
    ("profile-db/", "profile-db"),
    ("cost-model/", "cost-model"),
    ("planner-cli/", "planner"),
    ("executor/include/gp/exec/device.h", "device-api"),
    ("executor/include/gp/exec/op_kernel.h", "device-api"),
    ("executor/include/gp/exec/communicator.h", "device-api"),
    ("executor/include/gp/exec/optimizer.h", "device-api"),
    ("executor/include/gp/exec/nccl_layout.h", "device-api"),
    ("executor/include/gp/exec/device_info.h", "device-api"),
    ("executor/include/gp/exec/data_plane.h", "transport"),
    ("executor/include/gp/exec/gloo_communicator.h", "transport"),
    ("executor/include/gp/exec/", "runtime"),
    ("executor/src/device_api/", "device-api"),
    ("executor/src/cpu/", "backend-cpu"),
    ("executor/src/cuda/", "backend-cuda"),
    ("executor/src/backends/", "backends"),
    ("executor/src/transport/", "transport"),
    ("executor/src/checkpoint/", "checkpoint"),
    ("executor/src/runtime/", "runtime"),
    ("executor/src/control/", "control"),
    ("executor/src/job/", "job"),
    ("executor/src/launch/", "launch"),
    ("executor/src/node/", "node"),
    ("executor/src/program/", "program"),
    ("profiler/", "profiler"),
]

# Each module and the modules it may include directly (their own dependencies follow).
# Bottom to top; docs/architecture.md draws the same picture.
LAYERS = {
    "common": [],
    "proto": [],
    "model": ["common", "proto"],
    "plan": ["model"],
    "profile-db": ["model"],
    "cost-model": ["plan"],
    "planner": ["cost-model", "profile-db"],
    "device-api": ["plan"],
    "backend-cpu": ["device-api"],
    "backend-cuda": ["device-api"],
    "backends": ["backend-cpu", "backend-cuda"],
    "checkpoint": ["model"],
    "transport": ["backends"],
    "runtime": ["transport", "checkpoint"],
    "control": ["plan"],
    "launch": ["common"],
    "job": ["runtime", "control", "launch", "cost-model", "profile-db"],
    "node": ["runtime", "control", "launch"],
    "program": ["node", "job"],
    "profiler": ["runtime", "cost-model", "profile-db"],
}

SOURCE_SUFFIXES = (".cc", ".h", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
UNCHECKED = ("test/", "bench/", "tools/", "build", ".git/")


def module_of(rel):
    for prefix, name in MODULES:
        if rel == prefix or rel.startswith(prefix):
            return name
    return None


def closure(name, seen=None):
    seen = set() if seen is None else seen
    for dep in LAYERS[name]:
        if dep not in seen:
            seen.add(dep)
            closure(dep, seen)
    return seen


def product_files():
    for dirpath, dirnames, filenames in os.walk(ROOT):
        rel_dir = os.path.relpath(dirpath, ROOT)
        if rel_dir != "." and (rel_dir + "/").startswith(UNCHECKED):
            dirnames[:] = []
            continue
        for f in filenames:
            if f.endswith(SOURCE_SUFFIXES):
                yield os.path.normpath(os.path.join(rel_dir, f))


def include_roots(files):
    roots = set()
    for rel in files:
        parts = rel.split("/")
        for i, part in enumerate(parts):
            if part in ("include", "src"):
                roots.add("/".join(parts[: i + 1]))
    return sorted(roots)


def resolve(rel, target, roots):
    here = os.path.dirname(rel)
    for base in [here] + roots:
        cand = os.path.normpath(os.path.join(base, target))
        if os.path.isfile(os.path.join(ROOT, cand)):
            return cand
    if target.startswith("graphpipe/v1/"):
        return "proto/" + target  # generated from proto/graphpipe/v1/*.proto
    if target.endswith(".h.in") or target == "gp/common/version.h":
        return "common/include/" + target
    return None


def check(files, roots, planted=()):
    """Returns (problems, graph). `planted`: extra (file, include) pairs, for the self-test."""
    problems, graph = [], {}
    includes = []
    for rel in files:
        with open(os.path.join(ROOT, rel), encoding="utf-8") as fh:
            includes += [(rel, target) for target in INCLUDE.findall(fh.read())]
    for rel, target in list(includes) + list(planted):
        mod = module_of(rel)
        if mod is None:
            problems.append(f"{rel}: belongs to no module (add its folder to MODULES)")
            continue
        if mod not in LAYERS:
            problems.append(f"{rel}: module '{mod}' is not in LAYERS")
            continue
        dest = resolve(rel, target, roots)
        if dest is None:
            if target.startswith("gp/"):
                problems.append(f'{rel}: #include "{target}" names no file in the tree')
            continue
        dep = module_of(dest)
        if dep is None or dep == mod:
            continue
        graph.setdefault(mod, set()).add(dep)
        allowed = closure(mod)
        if dep not in allowed:
            problems.append(f'{rel}: #include "{target}": module {mod} may not include {dep} '
                            f"({mod} may use: {', '.join(sorted(allowed)) or 'nothing'})")
    return sorted(set(problems)), graph


# Includes that must be refused: the executor from the model, the planner from the executor and
# back, a backend from the table above it, the profiler from the planner.
PLANTED = [
    ("model/src/graph.cc", "gp/exec/device.h"),
    ("planner-cli/src/search.cc", "gp/exec/rank_session.h"),
    ("executor/src/runtime/stage_runner.cc", "gp/planner/search.h"),
    ("executor/src/cpu/cpu_kernels.cc", "gp/exec/rank_runner.h"),
    ("planner-cli/src/main.cc", "gp/profile/op_profiler.h"),
    ("executor/src/device_api/device.cc", "gp/cost/cost_model.h"),
]


def main():
    files = sorted(product_files())
    roots = include_roots(files)
    problems, graph = check(files, roots)
    if "--graph" in sys.argv:
        for mod in LAYERS:
            print(f"{mod}: {' '.join(sorted(graph.get(mod, ())))}")
    if "--self-test" in sys.argv:
        planted, _ = check([], roots, PLANTED)
        caught = {p.split(":")[0] for p in planted if "may not include" in p}
        for rel, target in PLANTED:
            if rel not in caught:
                problems.append(f'self-test: a planted #include "{target}" in {rel} was not caught')
    if problems:
        print("\n".join(problems))
        print(f"layering: {len(problems)} include(s) against the module layers")
        return 1
    print(f"layering: {len(files)} files in {len(LAYERS)} modules, every include runs downwards")
    return 0


if __name__ == "__main__":
    sys.exit(main())
