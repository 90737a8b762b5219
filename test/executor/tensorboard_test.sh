#!/usr/bin/env bash
# --tensorboard DIR as a user runs it: a launched 2-rank CPU job writes an event file whose every
# record verifies (both masked CRC-32Cs, checked by tensorboard_read.py's own CRC) and whose
# train/loss values are the .jsonl's losses, step for step; a resumed job adds a second file that
# starts with a SessionLog START at the resumed iteration; `local` writes one too; a DIR that
# cannot be created is refused before training, naming the flag and the path.
set -u
exe=$1
plan_bin=$2
launch=$3
tmp=$4
rm -rf "$tmp" && mkdir -p "$tmp"
export GRAPHPIPE_RUNS_DIR="$tmp/graphpipe-runs"  # the launcher's logs stay in here
. "$(dirname "$0")/../e2e/lib.sh"
reader="$(dirname "$0")/tensorboard_read.py"
launch() { GP_EXECUTOR="$exe" GP_PLANNER="$plan_bin" timeout 180 "$launch" "$@"; }

"$plan_bin" --log-level warn search --model zoo:tiny-mmt --cluster cpu-local --devices 2 \
  --batch 16 --micro-batches 4 --optimizer sgd --lr 0.01 --clip-grad-norm 100 --out "$tmp/plan.pb" \
  >/dev/null || exit 1

# The events of DIR's files (one JSON line per file) against a .jsonl: the file FILE_INDEX (in
# name order) starts with the file version and a SessionLog START at START_STEP, then holds the
# ITERATIONS of the .jsonl, in order, with its numbers.
matches_jsonl() {  # DIR JSONL FILE_INDEX START_STEP ITERATIONS...
  python3 "$reader" "$1" > "$tmp/read.out" || return 1
  python3 - "$tmp/read.out" "$2" "$3" "$4" "${@:5}" <<'PY'
import json, struct, sys, re
files = [json.loads(l) for l in open(sys.argv[1])]
lines = {r["iteration"]: r for r in map(json.loads, open(sys.argv[2]))}
f = files[int(sys.argv[3])]
start, want = int(sys.argv[4]), [int(x) for x in sys.argv[5:]]
assert re.fullmatch(r"events\.out\.tfevents\.[0-9]+\.[^.].*\.[0-9]+\.graphpipe", f["file"]), f["file"]
ev = f["events"]
assert ev[0].get("file_version") == "brain.Event:2", ev[0]
assert ev[1].get("session_log") == "START" and ev[1]["step"] == start, ev[1]
ev = ev[2:]
assert [e["step"] for e in ev] == want, [e["step"] for e in ev]
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
for e in ev:
    r = lines[e["step"]]
    s = e["scalars"]
    assert set(s) == {"train/loss", "train/lr", "train/grad_norm", "train/samples_per_s",
                      "train/ms_per_iteration"}, s
    assert s["train/loss"] == f32(r["loss"]), (s, r)
    assert s["train/lr"] == f32(r["lr"]) and s["train/grad_norm"] == f32(r["grad_norm"]), (s, r)
    assert s["train/samples_per_s"] == f32(r["samples_per_s"]), (s, r)
    assert e["wall_time"] > 1.6e9, e
PY
}

# 1. A launched 2-rank job, 6 iterations logged every 2, checkpointed after iteration 3.
launch --plan "$tmp/plan.pb" --nprocs 2 --iterations 6 --log-every 2 --checkpoint-dir "$tmp/ck" \
  --checkpoint-every 4 --metrics-out "$tmp/run.jsonl" --tensorboard "$tmp/tb/run" \
  > "$tmp/run1.log" 2>&1; rc=$?
check "a launched job with --tensorboard exits 0 and writes one event file" \
  '[ $rc -eq 0 ] && [ "$(ls "$tmp/tb/run" | wc -l)" -eq 1 ]'
check "every record verifies; train/loss (and the rest) equal the .jsonl's at steps 1 3 5" \
  'matches_jsonl "$tmp/tb/run" "$tmp/run.jsonl" 0 0 1 3 5'

# 2. Resumed to 8 iterations: a new file beside the first, START at 4, then steps 5 and 7.
cp "$tmp/tb/run/"* "$tmp/first-file"
first=$(ls "$tmp/tb/run")
launch --plan "$tmp/plan.pb" --nprocs 2 --iterations 8 --log-every 2 --checkpoint-dir "$tmp/ck" \
  --resume --metrics-out "$tmp/run.jsonl" --tensorboard "$tmp/tb/run" > "$tmp/run2.log" 2>&1; rc=$?
# (The files are told apart by name, not by name order: two jobs started in one second order
# by their pids, which need not grow.)
second_index=$(($(ls "$tmp/tb/run" | grep -n -v -x -F "$first" | cut -d: -f1) - 1))
check "a resumed job adds a second file and leaves the first as it was" \
  '[ $rc -eq 0 ] && [ "$(ls "$tmp/tb/run" | wc -l)" -eq 2 ] && cmp -s "$tmp/tb/run/$first" "$tmp/first-file"'
check "the second file starts with a SessionLog START at 4 and holds steps 5 7 of the .jsonl" \
  'matches_jsonl "$tmp/tb/run" "$tmp/run.jsonl" "$second_index" 4 5 7'

# 3. local writes the same events.
"$exe" --log-level warn local --plan "$tmp/plan.pb" --iterations 4 --log-every 2 \
  --metrics-out "$tmp/local.jsonl" --tensorboard "$tmp/tb/local" > "$tmp/local.log" 2>&1; rc=$?
check "local --tensorboard writes steps 1 3 matching its .jsonl" \
  '[ $rc -eq 0 ] && matches_jsonl "$tmp/tb/local" "$tmp/local.jsonl" 0 0 1 3'

# 4. A DIR that cannot be created (under a regular file): refused before any iteration.
touch "$tmp/not-a-dir"
launch --plan "$tmp/plan.pb" --nprocs 2 --iterations 4 --timeout 10 \
  --tensorboard "$tmp/not-a-dir/tb" > "$tmp/bad.log" 2>&1; rc=$?
check "launch --tensorboard under a file fails before training, naming the flag and the path" \
  '[ $rc -ne 0 ] && grep -qF -- "--tensorboard $tmp/not-a-dir/tb: cannot create it" "$tmp/bad.log" && ! grep -q "iteration [0-9]*: loss" "$tmp/bad.log"'
"$exe" local --plan "$tmp/plan.pb" --iterations 2 --tensorboard "$tmp/not-a-dir/tb" \
  > "$tmp/bad-local.log" 2>&1; rc=$?
check "local refuses it the same way (exit 2)" \
  '[ $rc -eq 2 ] && grep -qF -- "--tensorboard $tmp/not-a-dir/tb: cannot create it" "$tmp/bad-local.log"'

# 5. The reader does catch damage: one flipped byte in the last record.
python3 - "$tmp/first-file" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read()); b[-6] ^= 1; open(sys.argv[1], "wb").write(b)
PY
mkdir -p "$tmp/damaged" && mv "$tmp/first-file" "$tmp/damaged/events.out.tfevents.1.h.1.graphpipe"
check "a damaged record fails the reader's CRC check" \
  '! python3 "$reader" "$tmp/damaged" > /dev/null 2> "$tmp/damaged.err" && grep -q "bad data CRC" "$tmp/damaged.err"'

exit $fail
