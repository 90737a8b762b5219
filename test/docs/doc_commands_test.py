#!/usr/bin/env python3
"""Every command the README and docs/ show exists as written: for each graphpipe-plan,
graphpipe-executor, graphpipe-profile and graphpipe-launch command in a code block or an inline
code span, its subcommands exist and every --flag it uses is one that (sub)command's --help
lists (flags after a launcher's or submit's `--` are `graphpipe-executor run`'s). Commands that
the walk-through tests run (quickstart, own-model) are also checked here, by name only.

Usage: doc_commands_test.py SOURCE_DIR BIN_DIR
Prints one line per problem (file:line, the command, what is wrong) and exits 1 if any.
"""
import functools
import os
import re
import subprocess
import sys

PROGRAMS = ("graphpipe-plan", "graphpipe-executor", "graphpipe-profile", "graphpipe-launch")
# Global options that take a value (their value is no subcommand).
VALUED_GLOBALS = {"--log-level", "--config", "--cpu-threads"}
FLAG = re.compile(r"(?<![\w\-/.=])--[a-z][a-z0-9-]*")
# A program where a command starts: the line's start, or after a pipe, ;, && or $(, past any
# VAR=value assignments and a `$ ` prompt.
PROGRAM = re.compile(r"(?:^|[;|&]\s*|\$\(\s*)(?:\$ )?(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*"
                     r"((?:\S*/)?(graphpipe-(?:plan|executor|profile|launch)))(?![\w.-])")


@functools.lru_cache(maxsize=None)
def help_text(binary, *words):
    out = subprocess.run([binary, *words, "--help"], capture_output=True, text=True, timeout=30)
    return out.stdout + out.stderr


def subcommands(text):
    m = re.search(r"^Subcommands:\n((?:.*\n)*?)(?:\n|\Z)", text, re.M)
    if not m:
        return set()
    return {line.split()[0] for line in m.group(1).splitlines()
            if line.startswith("  ") and not line.startswith("   ") and line.split()}


def flags_of(text):
    return set(re.findall(r"--[A-Za-z][A-Za-z0-9-]*", text))


def commands_in(path):
    """(line number, command text) of each fenced code line and inline span naming a program."""
    lines = open(path, encoding="utf-8").read().split("\n")
    fenced, out, pending, start = False, [], "", 0
    for i, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            text = line.split(" #")[0] if not line.lstrip().startswith("#") else ""
            if pending:
                pending += " " + text.strip()
            else:
                pending, start = text, i
            if pending.rstrip().endswith("\\"):
                pending = pending.rstrip()[:-1]
                continue
            if PROGRAM.search(pending.strip()):
                out.append((start, pending.strip()))
            pending = ""
        else:
            for span in re.findall(r"`([^`]+)`", line):
                if PROGRAM.match(span.strip()) and " " in span.strip():
                    out.append((i, span.strip()))
    return out


def check_command(source, bindir, text):
    """Problems of one command line (possibly several commands joined by pipes or &&)."""
    problems = []
    for m in PROGRAM.finditer(text):
        prog = m.group(2)
        rest = text[m.end():]
        rest = re.split(r"\s(?:\||&&|;|\|\|)\s|\$\(|\)", rest)[0]
        words = rest.split()
        path = []
        if prog == "graphpipe-launch":
            binary = os.path.join(source, "scripts", prog)
        else:
            binary = os.path.join(bindir, prog)
        exe = os.path.join(bindir, "graphpipe-executor")
        after_dashdash = []
        if "--" in words:
            k = words.index("--")
            words, after_dashdash = words[:k], words[k + 1:]
        # Walk down the subcommands: the first bare word that is one, skipping global values.
        skip = False
        for w in words:
            if skip:
                skip = False
                continue
            if w.startswith("-"):
                skip = w in VALUED_GLOBALS
                continue
            subs = subcommands(help_text(binary, *path))
            if w in subs:
                path.append(w)
                continue
            if subs and re.fullmatch(r"[a-z][a-z-]+", w):
                problems.append(f"{prog} {' '.join(path)}: no subcommand '{w}'")
            break
        known = flags_of(help_text(binary, *path)) | flags_of(help_text(binary))
        if prog == "graphpipe-executor" and not path:
            # The legacy forms: `--plan P` means run, `--coordinator-only` coordinator.
            known |= flags_of(help_text(exe, "run")) | {"--coordinator-only"}
        for f in FLAG.findall(" ".join(words)):
            if f not in known:
                problems.append(f"{prog} {' '.join(path)}: no flag {f}".replace("  ", " "))
        if after_dashdash and (prog == "graphpipe-launch" or path == ["submit"]):
            run_flags = flags_of(help_text(exe, "run"))
            for f in FLAG.findall(" ".join(after_dashdash)):
                if f not in run_flags:
                    problems.append(f"{prog} ... -- {f}: graphpipe-executor run has no such flag")
    return problems


def main():
    source, bindir = sys.argv[1], os.path.abspath(sys.argv[2])
    docs = [os.path.join(source, "README.md")] + sorted(
        os.path.join(source, "docs", f) for f in os.listdir(os.path.join(source, "docs"))
        if f.endswith(".md"))
    checked, bad = 0, 0
    for doc in docs:
        for line, text in commands_in(doc):
            checked += 1
            for p in check_command(source, bindir, text):
                bad += 1
                print(f"{os.path.relpath(doc, source)}:{line}: {text.strip()[:100]}\n    {p}")
    print(f"{checked} documented commands checked, {bad} problems")
    # A parser that found nothing would pass vacuously.
    return 1 if bad or checked < 50 else 0


if __name__ == "__main__":
    sys.exit(main())
