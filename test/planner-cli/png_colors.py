#!/usr/bin/env python3
"""Checks that a PNG screenshot is not blank: it decodes the PNG (zlib and the five row filters,
8-bit RGB or RGBA, no interlacing: what Chromium writes) with the standard library only, and
requires enough distinct colours, enough non-background pixels, and each colour given with
--color (RRGGBB) on at least --min-pixels pixels.

  png_colors.py FILE [--color 4e79a7 ...] [--min-pixels 50]
Exit 0 when all hold; 1 naming what does not.
"""
import argparse
import struct
import sys
import zlib


def read_png(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG file")
    pos, idat, header = 8, [], None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    if header is None:
        raise ValueError("no IHDR chunk")
    width, height, depth, color, _, _, interlace = header
    if depth != 8 or color not in (2, 6) or interlace != 0:
        raise ValueError(f"unsupported PNG: depth {depth}, colour type {color}, "
                         f"interlace {interlace}")
    return width, height, 3 if color == 2 else 4, zlib.decompress(b"".join(idat))


def paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def unfilter_row(kind, row, prev, bpp):
    out = bytearray(row)
    n = len(out)
    if kind == 0:
        return out
    if kind == 2:
        return bytearray((out[i] + prev[i]) & 0xFF for i in range(n))
    for i in range(n):
        left = out[i - bpp] if i >= bpp else 0
        if kind == 1:
            out[i] = (out[i] + left) & 0xFF
        elif kind == 3:
            out[i] = (out[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif kind == 4:
            up_left = prev[i - bpp] if i >= bpp else 0
            out[i] = (out[i] + paeth(left, prev[i], up_left)) & 0xFF
        else:
            raise ValueError(f"unknown row filter {kind}")
    return out


def pixel_counts(path):
    width, height, bpp, raw = read_png(path)
    stride = width * bpp
    prev = bytearray(stride)
    counts = {}
    for y in range(height):
        start = y * (stride + 1)
        row = unfilter_row(raw[start], raw[start + 1:start + 1 + stride], prev, bpp)
        for x in range(0, stride, bpp):
            rgb = bytes(row[x:x + 3])
            counts[rgb] = counts.get(rgb, 0) + 1
        prev = row
    return width, height, counts


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("png")
    parser.add_argument("--color", action="append", default=[])
    parser.add_argument("--min-pixels", type=int, default=50)
    args = parser.parse_args()
    try:
        width, height, counts = pixel_counts(args.png)
    except (OSError, ValueError, zlib.error) as e:
        print(f"FAIL: {args.png}: {e}")
        return 1
    total = width * height
    background = max(counts.values())
    problems = []
    if len(counts) < 16:
        problems.append(f"only {len(counts)} distinct colours")
    if total - background < total // 100:
        problems.append(f"only {total - background} of {total} pixels differ from the background")
    for hex_color in args.color:
        n = counts.get(bytes.fromhex(hex_color), 0)
        if n < args.min_pixels:
            problems.append(f"colour #{hex_color} on {n} pixels (< {args.min_pixels})")
    print(f"{args.png}: {width}x{height}, {len(counts)} colours, "
          f"{total - background} non-background pixels")
    for p in problems:
        print(f"FAIL: {args.png}: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
