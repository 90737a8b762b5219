#!/usr/bin/env python3
"""Rank 0's memory over a long job (issue 40: "flat over 10^6 iterations").

Launches a multi-rank CPU job with scripts/graphpipe-launch, samples rank 0's resident size
(VmRSS) and thread count while it trains, and prints one table: iteration, RSS, threads, at
evenly spaced points, then the growth after the warm-up, its least-squares slope in bytes per
iteration and that slope over 10^6 iterations. Exit 1 when the growth projected to 10^6
iterations exceeds --limit-mb (default 1), 2 on a usage or launch error.

  bench/memory/run.py                          # 2 ranks of zoo:tiny-mmt, 10^6 iterations
  bench/memory/run.py --iterations 400000 --warmup 100000

Each run gets a directory of its own under --out (default out/memory/): the plan, the launcher's
log and the rank logs. Not a test: nothing in CTest or CI runs it (10^6 iterations of tiny-mmt take
about an hour on 2 cores; of the small CANDLE-Uno in bench/memory/README.md, about 10 minutes).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    p.add_argument("--model", default="zoo:tiny-mmt")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--iterations", type=int, default=1000000)
    p.add_argument("--warmup", type=int, default=100000,
                   help="iterations before growth counts (the allocator's and gRPC's pools "
                   "settle over the first ~10^5; the growth before it is printed too)")
    p.add_argument("--sample-every-s", type=float, default=5.0)
    p.add_argument("--limit-mb", type=float, default=1.0,
                   help="most growth over 10^6 iterations after the warm-up")
    p.add_argument("--out", default=os.path.join(ROOT, "out", "memory"))
    a = p.parse_args()
    if min(a.ranks, a.batch, a.iterations) < 1 or a.warmup < 0 or a.warmup >= a.iterations:
        p.error("--ranks, --batch and --iterations must be >= 1, 0 <= --warmup < --iterations")
    return a


def rank0_pid(run_dir):
    """The pid of the job's rank 0 (`graphpipe-executor run ... --rank 0` under run_dir)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        text = b" ".join(args).decode(errors="replace")
        if "graphpipe-executor" in text and " run " in text and run_dir in text:
            for k in range(len(args) - 1):
                if args[k] == b"--rank" and args[k + 1] == b"0":
                    return int(pid)
    return None


def status_field(pid, name):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(name + ":"):
                return int(line.split()[1])
    return None


def last_iteration(log):
    """The iteration of rank 0's last progress line ("iteration N: loss ..."), or None."""
    try:
        with open(log, errors="replace") as f:
            found = re.findall(r"iteration (\d+): loss", f.read())
    except OSError:
        return None
    return int(found[-1]) if found else None


def slope(points):
    """Least-squares bytes per iteration of (iteration, bytes) points."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx if sxx > 0 else 0.0


def main():
    a = parse_args()
    plan_tool = os.path.join(a.bin, "graphpipe-plan")
    launch = os.path.join(ROOT, "scripts", "graphpipe-launch")
    if not os.access(plan_tool, os.X_OK):
        print("memory: %s not built (run scripts/build.sh)" % plan_tool, file=sys.stderr)
        return 2
    # A directory of its own per run: an earlier run's launcher may still be finishing in another.
    os.makedirs(a.out, exist_ok=True)
    out = tempfile.mkdtemp(prefix=time.strftime("%Y%m%d-%H%M%S-"), dir=a.out)
    print("memory: plan, launcher log and rank logs in %s" % out, file=sys.stderr)
    plan = os.path.join(out, "plan.pb")
    r = subprocess.run([plan_tool, "search", "--model", a.model, "--cluster", "cpu-local",
                        "--devices", str(a.ranks), "--batch", str(a.batch), "--out", plan,
                        "--log-level", "warn"], capture_output=True, text=True)
    if r.returncode != 0:
        print("memory: search failed: %s" % r.stderr.strip(), file=sys.stderr)
        return 2
    run_dir = os.path.join(out, "run")
    log = open(os.path.join(out, "launch.log"), "w")
    # Progress every 1000 iterations: the table's iterations come from rank 0's progress lines.
    job = subprocess.Popen([launch, "--plan", plan, "--iterations", str(a.iterations),
                            "--log-every", "1000", "--log-dir", run_dir],
                           stdout=log, stderr=subprocess.STDOUT)
    samples = []  # (iteration, rss bytes, threads)
    pid = None
    rank0_log = os.path.join(run_dir, "attempt-0", "rank-0.log")
    try:
        while job.poll() is None:
            time.sleep(a.sample_every_s)
            pid = pid or rank0_pid(run_dir)
            if pid is None:
                continue
            try:
                rss_kb = status_field(pid, "VmRSS")
                threads = status_field(pid, "Threads")
            except OSError:
                continue  # rank 0 has exited
            it = last_iteration(rank0_log)
            if it is not None and rss_kb is not None:
                if samples and samples[-1][0] == it:
                    samples.pop()  # one row per progress line: its latest sample
                samples.append((it, rss_kb * 1024, threads))
                print("iteration %d: rank 0 %.2f MB, %d threads" % (it, rss_kb / 1024.0, threads),
                      file=sys.stderr)
    except KeyboardInterrupt:
        job.terminate()
        job.wait()
    if job.returncode != 0:
        print("memory: the job exited %d (see %s)" % (job.returncode, log.name), file=sys.stderr)
        return 2
    counted = [(it, rss) for it, rss, _ in samples if it >= a.warmup]
    if len(counted) < 3:
        print("memory: fewer than 3 samples after iteration %d; sample more often or run longer"
              % a.warmup, file=sys.stderr)
        return 2
    step = max(1, len(samples) // 12)
    print("Rank 0 of %s searched for %d CPU devices (%s), batch %d, %d iterations\n" %
          (a.model, a.ranks, r.stdout.strip().split(" -> ")[0] or "see plan.pb", a.batch,
           a.iterations))
    print("| iteration | rank 0 RSS, MB | threads |")
    print("|---:|---:|---:|")
    rows = samples[::step]
    if rows[-1] is not samples[-1]:
        rows.append(samples[-1])
    for it, rss, threads in rows:
        print("| %d | %.2f | %d |" % (it, rss / 2**20, threads))
    bytes_per_it = slope(counted)
    grown_mb = (counted[-1][1] - counted[0][1]) / 2**20
    per_million_mb = bytes_per_it * 1e6 / 2**20
    print("\nfrom iteration %d (the first sample): %+.2f MB" %
          (samples[0][0], (samples[-1][1] - samples[0][1]) / 2**20))
    print("after iteration %d: %+.2f MB over %d iterations, %.2f bytes/iteration "
          "(least squares), %.2f MB per 10^6 iterations (limit %.2f)" %
          (counted[0][0], grown_mb, counted[-1][0] - counted[0][0], bytes_per_it,
           per_million_mb, a.limit_mb))
    return 0 if per_million_mb <= a.limit_mb else 1


if __name__ == "__main__":
    sys.exit(main())
