#!/usr/bin/env python3
"""Write the fuzz seed corpus fuzz/corpus/wire/ from the shared vectors and
rxe captures: each packet as a UDP payload (BTH .. ICRC) and as a whole IP
packet, one file per distinct content (named by SHA-1), at most 4 rxe
packets per opcode and file.

usage: make_corpus.py SHARED_DIR OUT_DIR
"""
import glob
import hashlib
import json
import os
import struct
import sys


def pcap_packets(path):
    with open(path, "rb") as f:
        data = f.read()
    magic = data[:4]
    end = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    linktype = struct.unpack(end + "I", data[20:24])[0]
    off = 24
    while off + 16 <= len(data):
        _, _, caplen, _ = struct.unpack(end + "IIII", data[off:off + 16])
        frame = data[off + 16:off + 16 + caplen]
        off += 16 + caplen
        if linktype == 1:
            yield frame[14:]
        elif linktype == 113:
            yield frame[16:]
        else:
            yield frame


def udp_payload(ip):
    hl = 20 if ip[0] >> 4 == 4 else 40
    return ip[hl + 8:]


def main():
    shared, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    seeds = []
    # roce-vectors.json, and the XRC vectors where the directory has them
    # (tests/data/vectors/xrc-vectors.json)
    for vf in ("roce-vectors.json", "xrc-vectors.json"):
        path = os.path.join(shared, "vectors", vf)
        if not os.path.exists(path):
            continue
        with open(path) as f:
            for v in json.load(f):
                ip = bytes.fromhex(v["ip_packet_hex"])
                seeds += [ip, udp_payload(ip)]
    for path in sorted(glob.glob(os.path.join(shared, "vectors", "rxe", "*.pcap"))):
        per_op = {}
        for ip in pcap_packets(path):
            u = udp_payload(ip)
            op = u[0] if u else -1
            if per_op.get(op, 0) >= 4:
                continue
            per_op[op] = per_op.get(op, 0) + 1
            seeds += [ip, u]
    names = set()
    for s in seeds:
        name = hashlib.sha1(s).hexdigest()
        if name in names:
            continue
        names.add(name)
        with open(os.path.join(out, name), "wb") as f:
            f.write(s)
    print("%d seeds in %s" % (len(names), out))


if __name__ == "__main__":
    main()
