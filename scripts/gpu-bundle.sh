#!/usr/bin/env bash
# Packs a CUDA build's GPU-check binaries with the shared libraries a bare GPU machine may lack
# (gRPC, protobuf, OpenBLAS, spdlog, Gloo, ...) into one archive, for machines where GraphPipe's
# dependencies cannot be installed: scripts/gpu-check.sh --bundle ARCHIVE runs from it.
# The C/C++ runtime and the CUDA libraries (cudart, cuBLAS, NCCL) are left to the GPU machine.
# Usage: scripts/gpu-bundle.sh [BUILD_DIR] [ARCHIVE]   (defaults: build/, .gpu-bundle/bundle.tar.xz)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
archive=${2:-$root/.gpu-bundle/bundle.tar.xz}
bins=(gp_cuda_tests graphpipe-profile graphpipe-executor graphpipe-plan gp_gpu_bench)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$(dirname "$archive")"
for b in "${bins[@]}"; do
  if [ ! -x "$build/bin/$b" ]; then
    echo "gpu-bundle: $build/bin/$b is missing (build with CUDA first: GP_CUDA=ON scripts/build.sh)" >&2
    exit 2
  fi
  strip --strip-debug -o "$stage/bin/$b" "$build/bin/$b"
done
# Every shared library the binaries load, minus those any Linux or CUDA machine provides.
system='^(linux-vdso|ld-linux|libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnccl)\.so'
for b in "${bins[@]}"; do ldd "$build/bin/$b"; done | awk '/=> \// {print $1, $3}' | sort -u |
  while read -r name path; do
    if ! [[ $name =~ $system ]]; then cp -L "$path" "$stage/lib/$name"; fi
  done
tar -C "$stage" -cf - bin lib | xz -T2 -6 > "$archive"
echo "gpu-bundle: $(ls "$stage/lib" | wc -l) libraries, $(du -h "$archive" | cut -f1) -> $archive"
