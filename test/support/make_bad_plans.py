#!/usr/bin/env python3
"""Writes malformed variants of a JSON plan, one file per defect, each named after the field or
the defect its error must name: make_bad_plans.py PLAN.json OUT_DIR. Prints "<file> <expected
text>" per line."""
import copy
import json
import os
import sys

plan = json.load(open(sys.argv[1]))
out = sys.argv[2]


def drop_gradient_receive(p):
    """Removes the first gradient receive; returns the unmatched send the error must name."""
    for prog in p["programs"]:
        for k, ins in enumerate(prog["instructions"]):
            if ins.get("kind") == "INSTRUCTION_KIND_RECV_GRADIENT":
                del prog["instructions"][k]
                return "send of the gradient from rank %d to rank %d on edge %d" % (
                    ins.get("peer_rank", 0), prog.get("rank", 0), ins.get("edge", 0))
    sys.exit("make_bad_plans.py: the plan has no gradient receive to drop")


# Cases whose expected text depends on the plan: the mutation returns it.
computed = {"missing_gradient_receive": drop_gradient_receive}
cases = {
    "edge_to_missing_stage": (lambda p: p["edges"][0].update(dst_stage=99), "edges[0]: stages"),
    "no_stages": (lambda p: p.update(stages=[]), "plan.stages: empty"),
    "huge_mini_batch": (lambda p: p.update(mini_batch=str(2**40)), "plan.mini_batch = 1099511627776"),
    "devices_per_node_0": (lambda p: p["cluster"].update(devices_per_node=0), "devices_per_node = 0"),
    "huge_cluster": (lambda p: p["cluster"].update(num_nodes=2**30), "devices, more than the"),
    "optimizer_99": (lambda p: p["training"].update(optimizer=99), "training.optimizer = 99"),
    "nan_learning_rate": (lambda p: p["training"].update(learning_rate="NaN"),
                          "training.learning_rate = nan"),
    "inf_learning_rate": (lambda p: p["training"].update(learning_rate="Infinity"),
                          "training.learning_rate = inf"),
    "no_programs": (lambda p: p.update(programs=[]), "has no program"),
}
for name, (mutate, expected) in cases.items():
    bad = copy.deepcopy(plan)
    mutate(bad)
    path = os.path.join(out, name + ".json")
    json.dump(bad, open(path, "w"))
    print(path, expected)
for name, mutate in computed.items():
    bad = copy.deepcopy(plan)
    expected = mutate(bad)
    path = os.path.join(out, name + ".json")
    json.dump(bad, open(path, "w"))
    print(path, expected)
open(os.path.join(out, "empty_file.pb"), "w").close()
print(os.path.join(out, "empty_file.pb"), "num_nodes = 0")
