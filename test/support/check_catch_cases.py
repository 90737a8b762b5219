#!/usr/bin/env python3
"""Checks that CTest runs every Catch2 case, each exactly once.

A test name CMake cannot carry (an unbalanced '[', a ';') makes catch_discover_tests merge or
split CTest entries whose filters match nothing; Catch2 then exits 0 and the cases vanish. Two
checks catch that:
  static:  every CTest entry of a Catch2 binary selects exactly one case, and the entries
           together select every case the binary lists (--list-test-names-only);
  ran:     the ledger the test processes wrote (test/support/case_ledger.h) holds every listed
           case once, when this CTest run selected all of the binary's entries.

  check_catch_cases.py reset LEDGER_DIR
  check_catch_cases.py check --ctest-dir DIR --ledger LEDGER_DIR BINARY...
  check_catch_cases.py summary LEDGER_DIR

`check` writes LEDGER_DIR/summary.txt, which `summary` prints (scripts/test.sh does, at the end).
"""
import argparse
import collections
import json
import os
import shutil
import subprocess
import sys


def list_names(binary, args=()):
    out = subprocess.run([binary, *args, "--list-test-names-only"], capture_output=True,
                         text=True, check=False).stdout
    return [line for line in out.splitlines() if line.strip()]


def ctest_entries(ctest_dir, binaries):
    """CTest entries per binary: (entry name, arguments after the executable)."""
    out = subprocess.run(["ctest", "--show-only=json-v1"], cwd=ctest_dir, capture_output=True,
                         text=True, check=True).stdout
    entries = collections.defaultdict(list)
    for test in json.loads(out)["tests"]:
        command = test.get("command") or []
        if command and os.path.realpath(command[0]) in binaries:
            entries[os.path.realpath(command[0])].append((test["name"], command[1:]))
    return entries


def read_ledger(ledger_dir):
    """Processes the ledger recorded: binary path, filters, cases (name, assertions, ok), ended."""
    runs = []
    for file in sorted(os.listdir(ledger_dir)):
        if file == "summary.txt":
            continue
        run = {"binary": None, "filters": [], "cases": [], "ended": False}
        with open(os.path.join(ledger_dir, file), encoding="utf-8") as f:
            for line in f.read().splitlines():
                kind, _, rest = line.partition("\t")
                if kind == "binary":
                    run["binary"] = os.path.realpath(rest)
                elif kind == "filter":
                    run["filters"].append(rest)
                elif kind == "case":
                    assertions, status, name = rest.split("\t", 2)
                    run["cases"].append((name, int(assertions), status == "ok"))
                elif kind == "end":
                    run["ended"] = True
        runs.append(run)
    return runs


def check(args):
    binaries = {os.path.realpath(b): b for b in args.binaries}
    entries = ctest_entries(args.ctest_dir, binaries)
    runs = read_ledger(args.ledger)
    problems = []
    lines = []
    total_listed = total_ran = total_assertions = 0
    for path, binary in sorted(binaries.items()):
        name = os.path.basename(binary)
        listed = list_names(binary)
        total_listed += len(listed)
        if not listed:
            problems.append(f"{name}: lists no test case")
        # Static: what each entry selects, asked of Catch2 itself.
        selected = collections.Counter()
        for entry, entry_args in entries.get(path, []):
            names = list_names(binary, entry_args)
            if len(names) != 1:
                problems.append(f"{name}: CTest entry '{entry[:120]}' selects {len(names)} cases "
                                "(a name with '[', ']' or ';' that CMake cannot carry?)")
            selected.update(names)
        for case in listed:
            if selected[case] != 1:
                problems.append(f"{name}: case '{case}' is selected by {selected[case]} CTest "
                                "entries, not 1")
        # Ran: the cases this CTest run executed, per the ledger.
        own = [r for r in runs if r["binary"] == path]
        ran = collections.Counter(case for r in own for case, _, _ in r["cases"])
        assertions = sum(a for r in own for _, a, _ in r["cases"])
        total_ran += sum(ran.values())
        total_assertions += assertions
        for r in own:
            if not r["cases"]:
                problems.append(f"{name}: a run with filter {r['filters']} executed no case")
        n_entries = len(entries.get(path, []))
        if len(own) >= n_entries > 0:
            missing = [c for c in listed if ran[c] == 0]
            extra = [c for c, n in ran.items() if n > 1 or c not in listed]
            if missing or extra:
                problems.append(f"{name}: lists {len(listed)} cases, CTest ran {sum(ran.values())}"
                                f"; never ran: {missing[:5]}; ran twice or unlisted: {extra[:5]}")
            lines.append(f"  {name}: {len(listed)} listed, {sum(ran.values())} ran, "
                         f"{assertions} assertions")
        else:
            lines.append(f"  {name}: {len(listed)} listed, {sum(ran.values())} ran "
                         f"({len(own)} of {n_entries} entries selected in this run)")
    summary = (f"Catch2: {total_listed} cases listed by {len(binaries)} binaries; "
               f"CTest ran {total_ran} cases with {total_assertions} assertions")
    with open(os.path.join(args.ledger, "summary.txt"), "w", encoding="utf-8") as f:
        f.write(summary + "\n")
    print("\n".join(lines))
    print(summary)
    for p in problems:
        print("FAIL " + p)
    return 1 if problems else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    reset = sub.add_parser("reset", help="empty the ledger before the Catch2 entries run")
    reset.add_argument("ledger")
    run = sub.add_parser("check", help="compare listed cases with CTest entries and the ledger")
    run.add_argument("--ctest-dir", required=True)
    run.add_argument("--ledger", required=True)
    run.add_argument("binaries", nargs="+")
    summary = sub.add_parser("summary", help="print the last check's counts")
    summary.add_argument("ledger")
    args = parser.parse_args()
    if args.command == "reset":
        shutil.rmtree(args.ledger, ignore_errors=True)
        os.makedirs(args.ledger)
        return 0
    if args.command == "summary":
        path = os.path.join(args.ledger, "summary.txt")
        if not os.path.exists(path):
            print("Catch2: no case count (the case check did not run)")
            return 1
        with open(path, encoding="utf-8") as f:
            print(f.read(), end="")
        return 0
    return check(args)


if __name__ == "__main__":
    sys.exit(main())
