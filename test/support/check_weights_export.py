#!/usr/bin/env python3
"""Checks a .safetensors and an .npz that `graphpipe-executor export` wrote of one checkpoint.

Usage: check_weights_export.py FILE.safetensors FILE.npz NAME...

Always (the standard library only): the safetensors header as its format specifies (8-byte
little-endian length, JSON, F32 tensors back to back from offset 0, padding to 8 bytes), the
names are exactly NAME..., and the .npz (a zip of NAME.npy) holds the same float32 values.
With numpy: numpy.load reads the .npz. With the `safetensors` package: its loader reads the
.safetensors to the same arrays. What was skipped is printed; CI has neither package.
"""
import json
import struct
import sys
import zipfile


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    assert n % 8 == 0, "header length %d is not a multiple of 8" % n
    header = json.loads(data[8:8 + n])
    assert header.pop("__metadata__") == {"format": "pt"}
    body = data[8 + n:]
    tensors, end = {}, 0
    for name, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        b, e = t["data_offsets"]
        assert t["dtype"] == "F32" and b == end, (name, t)
        count = 1
        for d in t["shape"]:
            count *= d
        assert e - b == 4 * count, (name, t)
        tensors[name] = (tuple(t["shape"]), struct.unpack("<%df" % count, body[b:e]))
        end = e
    assert end == len(body), "bytes after the last tensor"
    return tensors


def npy_values(raw):
    assert raw[:8] == b"\x93NUMPY\x01\x00", "not .npy 1.0"
    (hlen,) = struct.unpack("<H", raw[8:10])
    assert b"'descr': '<f4'" in raw[10:10 + hlen]
    values = raw[10 + hlen:]
    return struct.unpack("<%df" % (len(values) // 4), values)


def main():
    st_path, npz_path, names = sys.argv[1], sys.argv[2], sorted(sys.argv[3:])
    st = read_safetensors(st_path)
    assert sorted(st) == names, (sorted(st), names)
    with zipfile.ZipFile(npz_path) as z:
        assert z.testzip() is None
        assert sorted(z.namelist()) == [n + ".npy" for n in names], z.namelist()
        for n in names:
            assert npy_values(z.read(n + ".npy")) == st[n][1], n
    print("ok: header, names and values (standard library)")
    try:
        import numpy as np
    except ImportError:
        print("skipped: numpy checks (no numpy)")
        return 0
    npz = np.load(npz_path)
    for n in names:
        assert npz[n].dtype == np.float32 and npz[n].shape == st[n][0], n
    print("ok: numpy.load reads the .npz")
    try:
        from safetensors.numpy import load_file
    except ImportError:
        print("skipped: safetensors checks (no safetensors package)")
        return 0
    loaded = load_file(st_path)
    assert sorted(loaded) == names
    for n in names:
        assert np.array_equal(loaded[n], npz[n]), n
    print("ok: the safetensors package reads the .safetensors to the .npz's arrays")
    return 0


if __name__ == "__main__":
    sys.exit(main())
