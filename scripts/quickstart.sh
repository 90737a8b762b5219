#!/usr/bin/env bash
# Installs dependencies, builds, and runs the main job on the embedded default model: a summary
# of the multi-modal transformer (4 branches x 8 layers) from the model zoo.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
bin="$root/build/bin"
echo
echo "== graphpipe-plan model-info --model zoo:mmt"
"$bin/graphpipe-plan" model-info --model zoo:mmt
echo
echo "== graphpipe-profile devices"
"$bin/graphpipe-profile" devices
