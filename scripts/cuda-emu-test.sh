#!/usr/bin/env bash
# Runs the GPU kernel tests (test/cuda/cuda_kernels_test.cc) on the CPU, without a GPU: the real
# CUDA backend sources (.cc as they are; .cu with each <<<grid, block>>> launch rewritten into a
# call that runs every CUDA thread as a host thread, with real barriers and warp shuffles) against
# an emulated CUDA runtime and cuBLAS (tools/cuda-emu/). It checks indexing, reductions,
# synchronisation inside blocks, launch limits and the host code's use of the runtime; it cannot
# check timing, stream ordering or cuBLAS's own rounding. Slow (every CUDA thread is a thread):
# the whole binary takes ~25 minutes on 2 cores; pass Catch2 test names (comma-separated) to
# run fewer.
# Needs a built build/ (scripts/build.sh). Usage: scripts/cuda-emu-test.sh ["name,name,..."]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
b=$root/build
out=$b/cuda-emu
emu=$root/tools/cuda-emu
mkdir -p "$out/gen" "$out/obj"
rm -f "$out"/obj/*.o
for lib in executor/libgp_kernels_cpu.a cost-model/libgp_graph.a common/libgp_common.a \
           proto/libgp_proto.a proto/libgp_onnx_proto.a; do
  [ -f "$b/$lib" ] || { echo "cuda-emu-test: $b/$lib is missing; run scripts/build.sh" >&2; exit 2; }
done
flags=(-O2 -std=gnu++20 -DGP_HAVE_CUDA=1 -DSPDLOG_COMPILED_LIB -DSPDLOG_FMT_EXTERNAL
       -I"$emu/include" -I"$root/executor/include" -I"$root/executor/src"
       -I"$root/cost-model/include" -I"$root/common/include" -I"$b/common/gen" -I"$b/proto/gen"
       -I"$root/test/support")
src=$root/executor/src
for cu in "$src"/cuda/*_kernels.cu; do
  python3 "$emu/convert_launches.py" "$cu" > "$out/gen/$(basename "$cu" .cu)_cu.cc"
done
printf '#define CATCH_CONFIG_MAIN\n#include <catch2/catch.hpp>\n' > "$out/gen/test_main.cc"
# NCCL has no emulation: the data plane's communicator is left out (test/cuda/nccl_test.cc too).
cuda_sources=()
for f in "$src"/cuda/*.cc; do [[ $f == */nccl_communicator.cc ]] || cuda_sources+=("$f"); done
sources=("$src/device.cc" "$src/optimizer.cc" "${cuda_sources[@]}" "$out"/gen/*.cc
         "$emu/emu_runtime.cc" "$root/test/cuda/cuda_kernels_test.cc")
pids=()
for s in "${sources[@]}"; do
  o="$out/obj/$(echo "${s#"$root"/}" | tr '/' '_').o"
  g++ "${flags[@]}" -c "$s" -o "$o" &
  pids+=($!)
  if [ ${#pids[@]} -ge "${GP_JOBS:-$(nproc)}" ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
done
for p in "${pids[@]}"; do wait "$p"; done
g++ -o "$out/cuda_kernels_emu_test" "$out"/obj/*.o "$b/executor/libgp_kernels_cpu.a" \
  "$b/cost-model/libgp_graph.a" "$b/common/libgp_common.a" "$b/proto/libgp_proto.a" \
  "$b/proto/libgp_onnx_proto.a" -rdynamic -lopenblas -lspdlog -lfmt -lprotobuf -lpthread -ldl
"$out/cuda_kernels_emu_test" "$@"
