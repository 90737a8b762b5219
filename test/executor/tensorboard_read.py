#!/usr/bin/env python3
"""Reads TensorBoard event files without TensorBoard, for the e2e tests: checks every record's
length and data CRC (masked CRC-32C, computed here independently of the executor) and decodes
the protobuf wire format of the events it writes. Prints one JSON object per file:
{"file": NAME, "events": [{"wall_time", "step", "file_version"?, "session_log"?, "scalars"?}]}.
Exits 1 naming the file and offset of the first record that does not verify.

  tensorboard_read.py DIR   every events.out.tfevents.* file of DIR, in name order
"""
import json
import os
import struct
import sys


def _table():
    out = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        out.append(c)
    return out


TABLE = _table()


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc = TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283


def fields(buf):
    """(field number, wire type, value) of a message's bytes."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(buf, i)
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 2:
            n, i = varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError("wire type %d" % wt)
        yield num, wt, v


def varint(buf, i):
    shift = v = 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def event(buf):
    e = {"wall_time": 0.0, "step": 0}
    for num, wt, v in fields(buf):
        if num == 1 and wt == 1:
            e["wall_time"] = struct.unpack("<d", v)[0]
        elif num == 2 and wt == 0:
            e["step"] = v
        elif num == 3 and wt == 2:
            e["file_version"] = v.decode()
        elif num == 5 and wt == 2:
            scalars = {}
            for vn, vwt, value in fields(v):
                assert vn == 1 and vwt == 2, (vn, vwt)
                tag, simple = None, 0.0
                for n2, w2, x in fields(value):
                    if n2 == 1 and w2 == 2:
                        tag = x.decode()
                    elif n2 == 2 and w2 == 5:
                        simple = struct.unpack("<f", x)[0]
                scalars[tag] = simple
            e["scalars"] = scalars
        elif num == 7 and wt == 2:
            status = 0
            for n2, w2, x in fields(v):
                if n2 == 1 and w2 == 0:
                    status = x
            e["session_log"] = {1: "START", 2: "STOP", 3: "CHECKPOINT"}.get(status, status)
        else:
            raise ValueError("unexpected field %d (wire type %d)" % (num, wt))
    return e


def read(path):
    data = open(path, "rb").read()
    events, at = [], 0
    while at < len(data):
        header = data[at:at + 8]
        if len(data) - at < 12 or struct.unpack("<I", data[at + 8:at + 12])[0] != masked(header):
            raise ValueError("%s: offset %d: bad length CRC" % (path, at))
        (n,) = struct.unpack("<Q", header)
        body = data[at + 12:at + 12 + n]
        crc = data[at + 12 + n:at + 16 + n]
        if len(body) != n or len(crc) != 4 or struct.unpack("<I", crc)[0] != masked(body):
            raise ValueError("%s: offset %d: bad data CRC" % (path, at))
        events.append(event(body))
        at += 16 + n
    return events


def main():
    d = sys.argv[1]
    names = sorted(f for f in os.listdir(d) if f.startswith("events.out.tfevents."))
    try:
        for f in names:
            print(json.dumps({"file": f, "events": read(os.path.join(d, f))}))
    except (ValueError, IndexError, struct.error) as e:
        print("tensorboard_read: %s" % e, file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
