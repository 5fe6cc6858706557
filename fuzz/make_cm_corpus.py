#!/usr/bin/env python3
"""Write the seed corpus of fuzz_cm_mad (fuzz/corpus/cm/): inputs in the
harness's record format (see fuzz_cm_mad.c), each short enough that the
zeros the reader returns past the end complete it:

  * the CM MADs Linux sent in the rxe-vm harness's rping capture (REQ, REP,
    RTU, DREQ, DREP of the kernel's CM), as raw records from the peer;
  * the same header cut at every interesting length (truncated MADs);
  * a well-formed message of every attribute for each of A's ids, with the
    selector bits all clear and all set;
  * REQ floods from the peer and from a stranger;
  * every user call on some of A's ids;
  * an exchange pumped through and then replayed.

usage: make_cm_corpus.py RXEVM_PCAPS_DIR OUT_DIR
"""
import hashlib
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_corpus import pcap_packets, udp_payload  # noqa: E402

N_ATTRS = 11     # attrs[] in the harness
N_A_IDS = 12     # A's ids after setup, listeners excluded (about)
OP_RAW, OP_TEMPLATE, OP_FLOOD, OP_PUMP, OP_USER, OP_REPLAY = 0, 1, 4, 5, 6, 7
SRC_PEER, SRC_STRANGER, SRC_SELF = 0, 2, 3


def raw(mad, src=SRC_PEER):
    return bytes([OP_RAW]) + struct.pack(">H", len(mad)) + mad + bytes([src])


def kernel_mads(pcaps):
    path = os.path.join(pcaps, "rping.pcap")
    out = []
    for ip in pcap_packets(path):
        u = udp_payload(ip)
        # BTH (12) + DETH (8) + MAD (256) + ICRC (4), to QP1
        if len(u) >= 12 + 8 + 256 and struct.unpack(">I", u[4:8])[0] & 0xffffff == 1:
            out.append(u[20:20 + 256])
    return out


def main():
    pcaps, outdir = sys.argv[1], sys.argv[2]
    os.makedirs(outdir, exist_ok=True)
    seeds = []
    mads = kernel_mads(pcaps)
    if not mads:
        sys.exit("no CM MADs in %s/rping.pcap" % pcaps)
    for m in mads:
        seeds.append(raw(m))
        seeds.append(raw(m, SRC_STRANGER))
    hdr = mads[0]
    for n in (0, 1, 4, 23, 24, 25, 100, 255):
        seeds.append(raw(hdr[:n]))
    seeds.append(raw(hdr + bytes(40)))               # longer than a MAD
    for bad in ((1, 0x04), (2, 0x01), (3, 0x81), (0, 0x02), (4, 0x80)):
        m = bytearray(hdr)
        m[bad[0]] = bad[1]                            # class, version, method, base
        seeds.append(raw(bytes(m)))
    for attr in range(N_ATTRS):
        for c in range(N_A_IDS):
            for sel in (0x00, 0xff):
                seeds.append(bytes([OP_TEMPLATE, attr, c, sel]))
        seeds.append(bytes([OP_TEMPLATE, attr, 0x80]) + bytes(8) + bytes([0x01]))
    # a REQ from a stranger naming the peer's CA GUID and the QPN of an
    # established connection (stale: REJ, but that connection must stay)
    for c in range(4):
        seeds.append(bytes([OP_TEMPLATE, 0, c, 0x1c]) + bytes(4) + b"\x00\x07" +
                     bytes([0, SRC_STRANGER]))
    for src in (SRC_PEER, SRC_STRANGER):
        seeds.append(bytes([OP_FLOOD, 159, src]) + struct.pack(">I", 0x10000))
    for what in range(10):
        for which in (0, 3, 6, 9):
            seeds.append(bytes([OP_USER, what, which, 8, 8]))
    for k in range(4):
        seeds.append(bytes([OP_USER, 0, k, OP_PUMP, 63, OP_REPLAY, k, SRC_PEER]))
        seeds.append(bytes([OP_USER, 1, k, OP_PUMP, 63, OP_REPLAY, k, SRC_STRANGER]))
    names = set()
    for s in seeds:
        name = hashlib.sha1(s).hexdigest()
        names.add(name)
        with open(os.path.join(outdir, name), "wb") as f:
            f.write(s)
    print("%d seeds in %s" % (len(names), outdir))


if __name__ == "__main__":
    main()
