#!/usr/bin/env python3
"""Runs a command on a real terminal and types Ctrl-C into it, as a user would.

  pty_interrupt.py --log FILE --after REGEX [--when-file F] [--times N] [--gap S] [--timeout S]
                   -- CMD...

CMD starts as the leader of a new session whose controlling terminal is a fresh pty, so it is
the terminal's foreground process group; what it prints goes to FILE. Once the output matches
REGEX (and file F exists, when given), "\\x03" is written to the pty master N times, S seconds
apart: the kernel's line discipline turns each into SIGINT for the whole foreground group, as
typing ^C does (no process is signalled by pid). Exits with CMD's exit status (128 + signal
when a signal ended it); 124 when CMD is still running after --timeout seconds (then killed).
"""
import argparse
import os
import pty
import re
import select
import signal
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--log", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--when-file", default="")
    ap.add_argument("--times", type=int, default=1)
    ap.add_argument("--gap", type=float, default=0.5)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.cmd[1:] if args.cmd and args.cmd[0] == "--" else args.cmd
    pattern = re.compile(args.after.encode())

    pid, master = pty.fork()  # the child: a new session, the pty its controlling terminal
    if pid == 0:
        # As a shell starts a foreground job: SIGINT as the terminal's user expects it, even
        # when this driver runs in the background of a script (where it is ignored).
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)
        os.execvp(cmd[0], cmd)
    seen = b""
    matched = False
    sent = 0
    next_send = None
    deadline = time.monotonic() + args.timeout
    with open(args.log, "wb") as log:
        while True:
            now = time.monotonic()
            if now > deadline:
                os.killpg(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                print(f"pty_interrupt: still running after {args.timeout} s", file=sys.stderr)
                return 124
            if (next_send is None and matched and
                    (not args.when_file or os.path.exists(args.when_file))):
                next_send = now
            if next_send is not None and sent < args.times and now >= next_send:
                os.write(master, b"\x03")
                sent += 1
                next_send = now + args.gap
            ready, _, _ = select.select([master], [], [], 0.05)
            if not ready:
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every process holding the terminal has closed it
                chunk = b""
            if not chunk:
                break
            log.write(chunk)
            log.flush()
            if not matched:
                seen = (seen + chunk)[-65536:]
                matched = pattern.search(seen) is not None
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


if __name__ == "__main__":
    sys.exit(main())
