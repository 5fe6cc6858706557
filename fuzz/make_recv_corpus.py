#!/usr/bin/env python3
"""Write the seed corpus of fuzz_recv_path (fuzz/corpus/recv/): inputs in
the harness's format (see fuzz_recv_path.c) whose object prefix brings every
QP to RTS (PMTU 1024, all remote rights, receives posted, three sends on the
first RC QP), followed by packet records: the UDP payloads of the rxe
captures (at most 3 per opcode and capture) and crafted packets for each
hostile case of docs/security.md. The harness fixes the destination QPN,
P_Key, R_Key/VA (ctl2), PSN and ICRC, so seeds stay valid for any run.

usage: make_recv_corpus.py SHARED_DIR OUT_DIR
"""
import glob
import hashlib
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_corpus import pcap_packets, udp_payload  # noqa: E402

NQP = 6
SRQ_QPS = (1, 4)


def recv_wr():
    # num_sge 1, then 3 SGE selectors: MR_ALL at offset 0, whole MR
    return bytes([1]) + bytes([0, 0, 0]) * 3


def prefix():
    out = b""
    for i in range(NQP):
        out += bytes([3])                      # RTS
        f = 0x80 | 0x10 | 0x07                 # all rights, PMTU 1024
        out += bytes([f, 0, 4, 7, 1, 4, 0])    # rq_psn, rd_atomic, retry, rnr, rd, sq_psn
        if i not in SRQ_QPS:
            out += bytes([2]) + recv_wr() * 2
        if i == 0:
            out += bytes([3])
            # SEND 64 B, READ 100 B, FETCH_ADD
            out += bytes([0x40]) + struct.pack(">HHII", 0, 64, 0, 0)
            out += bytes([0x41]) + struct.pack(">HHII", 0, 100, 0x1000, 0x1234)
            out += bytes([0x42]) + struct.pack(">HII", 8, 0x2000, 0x1234)
        else:
            out += bytes([0])
    out += bytes([2]) + recv_wr() * 2          # SRQ
    # the XRC target (domain A) and initiator to RTS, the initiator posts
    # nothing; two receives on each domain's XRC SRQ
    for i in range(2):
        out += bytes([3, 0x80 | 0x10 | 0x07, 0, 4, 7, 1, 4, 0])
        if i == 1:
            out += bytes([0])
    out += (bytes([2]) + recv_wr() * 2) * 2
    return out


def record(payload, target, key=0, va_mode=0, psn=True, good_icrc=True):
    ctl = 0x80 | (0x20 if good_icrc else 0) | target
    ctl2 = 0x80 | (0x40 if psn else 0) | (va_mode << 4) | key
    out = bytes([ctl, ctl2]) + struct.pack(">H", len(payload)) + payload
    if psn:
        out += bytes([0])
    return out


def record_xrc(payload, initiator=False, srq_sel=0, key=0, va_mode=0):
    """A packet for an XRC QP (pick_qpn's selector 6, then odd: XRC); its
    XRCETH names A's SRQ (srq_sel 0), B's (1, another domain) or is left
    as built (3)."""
    ctl = 0x80 | 0x20 | 6
    ctl2 = 0x80 | 0x40 | (va_mode << 4) | key
    return (bytes([ctl, ctl2]) + struct.pack(">H", len(payload)) +
            bytes([3 if initiator else 1]) + payload + bytes([0, srq_sel]))


def xrceth(srqn=0):
    return struct.pack(">I", srqn)


def bth(op, psn=0, ackreq=True, pad=0):
    return struct.pack(">BBHBBHBBH", op, pad << 4, 0xFFFF, 0, 0, 0,
                       0x80 if ackreq else 0, psn >> 16, psn & 0xFFFF)


def reth(va, rkey, length):
    return struct.pack(">QII", va, rkey, length)


def atmeth(va, rkey, swap, comp):
    return struct.pack(">QIQQ", va, rkey, swap, comp)


ICRC = b"\0\0\0\0"


def crafted():
    """(name, [records]) for each attack of docs/security.md."""
    s = []
    def one(name, pkt, target=0, key=0, va_mode=0, **kw):
        s.append((name, [record(pkt, target, key, va_mode, **kw)]))
    one("send_only", bth(0x04) + b"A" * 100 + ICRC)
    s.append(("send_first_middle_last",
              [record(bth(0x00, ackreq=False) + b"B" * 1024 + ICRC, 0),
               record(bth(0x01, ackreq=False) + b"C" * 1024 + ICRC, 0),
               record(bth(0x02) + b"D" * 8 + ICRC, 0)]))
    one("write_only", bth(0x0A) + reth(0, 0, 64) + b"W" * 64 + ICRC, key=1, va_mode=1)
    s.append(("write_first_last",
              [record(bth(0x06, ackreq=False) + reth(0, 0, 1500) + b"X" * 1024 + ICRC, 0, 1, 1),
               record(bth(0x08) + b"Y" * 476 + ICRC, 0)]))
    one("read_3000", bth(0x0C) + reth(0, 0, 3000) + ICRC, key=1, va_mode=1)
    one("read_beyond_mr", bth(0x0C) + reth(0x10, 0, 0x100) + ICRC, key=1, va_mode=2)
    one("read_before_mr", bth(0x0C) + reth(0x10, 0, 0x100) + ICRC, key=1, va_mode=3)
    one("read_other_pd", bth(0x0C) + reth(0, 0, 16) + ICRC, key=4, va_mode=1)
    one("read_stale_key", bth(0x0C) + reth(0, 0, 16) + ICRC, key=8)
    one("read_zero_len_bad_key", bth(0x0C) + reth(0xdead, 0, 0) + ICRC, key=9)
    one("write_len_wrap", bth(0x0A) + reth(0xFFFFFFFFFFFFFF00, 0, 0x200) + b"Z" * 64 + ICRC, key=1)
    one("write_len_2g", bth(0x0A) + reth(0, 0, 0x80000001) + b"Z" * 64 + ICRC, key=1, va_mode=1)
    one("write_rread_mr", bth(0x0A) + reth(0, 0, 64) + b"W" * 64 + ICRC, key=3, va_mode=1)
    one("write_local_only_mr", bth(0x0A) + reth(0, 0, 64) + b"W" * 64 + ICRC, key=2, va_mode=1)
    one("write_small_mr_edge", bth(0x0A) + reth(0x10, 0, 32) + b"W" * 32 + ICRC, key=5, va_mode=2)
    one("write_zero_based", bth(0x0A) + reth(0x100, 0, 32) + b"W" * 32 + ICRC, key=7)
    one("fetch_add", bth(0x14) + atmeth(0x10, 0, 1, 0) + ICRC, key=1, va_mode=1)
    one("cmp_swap", bth(0x13) + atmeth(0x18, 0, 5, 0) + ICRC, key=1, va_mode=1)
    one("atomic_misaligned", bth(0x14) + atmeth(0x13, 0, 1, 0) + ICRC, key=1, va_mode=1)
    one("atomic_guess_key", bth(0x14) + atmeth(0x10, 0, 1, 0) + ICRC, key=10)
    one("send_with_inv", bth(0x17) + struct.pack(">I", 0) + b"I" * 8 + ICRC, key=1)
    one("send_with_inv_other_pd", bth(0x17) + struct.pack(">I", 0) + b"I" * 8 + ICRC, key=4)
    one("uc_send", bth(0x24) + b"U" * 40 + ICRC, target=3)
    one("uc_write", bth(0x2A) + reth(0, 0, 40) + b"U" * 40 + ICRC, target=3, key=1, va_mode=1)
    one("ud_send", bth(0x64) + struct.pack(">II", 0, 0x4242) + b"D" * 60 + ICRC, target=5)
    one("ud_send_to_rc", bth(0x64) + struct.pack(">II", 0, 0x4242) + b"D" * 60 + ICRC, target=0)
    one("rc_send_to_ud", bth(0x04) + b"A" * 10 + ICRC, target=5)
    one("ack", bth(0x11) + struct.pack(">I", 0x1F000001) + ICRC)
    one("nak_seq", bth(0x11) + struct.pack(">I", 0x60000000) + ICRC)
    one("atomic_ack", bth(0x12) + struct.pack(">IQ", 0x1F000001, 77) + ICRC)
    one("read_resp_only", bth(0x10) + struct.pack(">I", 0x1F000001) + b"R" * 100 + ICRC)
    one("cnp", bth(0x81) + b"\0" * 16 + ICRC)
    one("bad_icrc", bth(0x04) + b"A" * 12 + ICRC, good_icrc=False)
    one("truncated", bth(0x0A)[:10], psn=False)
    one("psn_far", bth(0x04, psn=0x400000) + b"A" * 4 + ICRC, psn=False)
    # XRC (roce-wire §3.1, §4.5)
    def x(name, pkt, **kw):
        s.append((name, [record_xrc(pkt, **kw)]))
    x("xrc_send_only", bth(0xA4) + xrceth() + b"X" * 100 + ICRC)
    x("xrc_send_other_domain", bth(0xA4) + xrceth() + b"X" * 100 + ICRC, srq_sel=1)
    x("xrc_send_unknown_srq", bth(0xA4) + xrceth(0x123456) + b"X" * 10 + ICRC, srq_sel=3)
    s.append(("xrc_send_first_last",
              [record_xrc(bth(0xA0, ackreq=False) + xrceth() + b"F" * 1024 + ICRC),
               record_xrc(bth(0xA2) + xrceth() + b"L" * 8 + ICRC, srq_sel=1)]))
    x("xrc_write_only", bth(0xAA) + xrceth() + reth(0, 0, 64) + b"W" * 64 + ICRC, key=1,
      va_mode=1)
    x("xrc_write_other_domain", bth(0xAA) + xrceth() + reth(0, 0, 64) + b"W" * 64 + ICRC,
      srq_sel=1, key=1, va_mode=1)
    x("xrc_read", bth(0xAC) + xrceth() + reth(0, 0, 3000) + ICRC, key=1, va_mode=1)
    x("xrc_fetch_add", bth(0xB4) + xrceth() + atmeth(0x10, 0, 1, 0) + ICRC, key=1, va_mode=1)
    x("xrc_cmp_swap_other_pd", bth(0xB3) + xrceth() + atmeth(0x18, 0, 5, 0) + ICRC, key=4,
      va_mode=1)
    x("xrc_ack_to_initiator", bth(0xB1) + struct.pack(">I", 0x1F000001) + ICRC, initiator=True)
    x("xrc_read_resp_to_initiator", bth(0xB0) + struct.pack(">I", 0x1F000001) + b"R" * 64 + ICRC,
      initiator=True)
    x("xrc_send_to_initiator", bth(0xA4) + xrceth() + b"S" * 8 + ICRC, initiator=True)
    one("xrc_send_to_rc", bth(0xA4) + xrceth() + b"Q" * 8 + ICRC)
    x("rc_send_to_xrc_target", bth(0x04) + b"P" * 8 + ICRC)
    return s


def main():
    shared, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    pre = prefix()
    seeds = [pre + b"".join(recs) for _, recs in crafted()]
    for path in sorted(glob.glob(os.path.join(shared, "vectors", "rxe", "*.pcap"))):
        per_op = {}
        for ip in pcap_packets(path):
            u = udp_payload(ip)
            if not u or len(u) > 4400:
                continue
            op = u[0]
            if per_op.get(op, 0) >= 3:
                continue
            per_op[op] = per_op.get(op, 0) + 1
            target = 3 if op >> 5 == 1 else 5 if op >> 5 == 3 else 0
            seeds.append(pre + record(u, target, key=1 if op in (0x06, 0x0A, 0x0B, 0x0C, 0x13, 0x14)
                                      else 0, va_mode=1))
    names = set()
    for sd in seeds:
        name = hashlib.sha1(sd).hexdigest()
        if name in names:
            continue
        names.add(name)
        with open(os.path.join(out, name), "wb") as f:
            f.write(sd)
    print("%d seeds in %s" % (len(names), out))


if __name__ == "__main__":
    main()
