#!/usr/bin/env python3
"""Write tests/data/vectors/xrc-vectors.json: XRC packets (roce-wire §3.1,
§4.5) in the schema of roce-vectors.json, built here in Python from the
format and the ICRC rule (roce-wire §9: zlib CRC-32 over the masked IP/UDP
headers, 8 0xFF bytes first), independently of urvt's C codec.

The builder proves itself first: it rebuilds every packet of
roce-vectors.json from its decoded fields and must get the same IP packet
and ICRC input bytes, else it writes nothing.

usage: make_xrc_vectors.py ROCE_VECTORS_JSON OUT_JSON [--check]
(--check: compare with OUT_JSON instead of writing it)
"""
import ipaddress
import json
import struct
import sys
import zlib

# header order and layout, roce-wire §3 (XRCETH right after the BTH)
ORDER = ["XRCETH", "DETH", "RETH", "AtomicETH", "AETH", "AtomicAckETH", "ImmDt", "IETH"]


def num(v):
    return int(v, 16) if isinstance(v, str) else int(v)


def ext_bytes(name, h):
    if name == "XRCETH":
        return struct.pack(">I", num(h["srqn"]) & 0xFFFFFF)
    if name == "DETH":
        return struct.pack(">II", num(h["qkey"]), num(h["src_qp"]) & 0xFFFFFF)
    if name == "RETH":
        return struct.pack(">QII", num(h["va"]), num(h["rkey"]), num(h["dma_length"]))
    if name == "AtomicETH":
        return struct.pack(">QIQQ", num(h["va"]), num(h["rkey"]), num(h["swap_add"]),
                           num(h["compare"]))
    if name == "AETH":
        return struct.pack(">I", num(h["syndrome"]) << 24 | num(h["msn"]))
    if name == "AtomicAckETH":
        return struct.pack(">Q", num(h["orig_remote_data"]))
    if name == "ImmDt":
        return struct.pack(">I", num(h))
    if name == "IETH":
        return struct.pack(">I", num(h["rkey"]))
    raise ValueError(name)


def ipv4_csum(h):
    s = sum(struct.unpack(">10H", h))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def build(v):
    """(ip_packet, icrc_input, icrc value) of a vector's decoded fields."""
    b = v["bth"]
    pay = bytes.fromhex(v["payload_hex"])
    pad = b["padcnt"]
    bth = struct.pack(">BBHBBHBBH", b["opcode"], b["se"] << 7 | b["m"] << 6 | pad << 4 | b["tver"],
                      b["pkey"], b["byte4_resv8a"], b["dest_qpn"] >> 16, b["dest_qpn"] & 0xFFFF,
                      b["ackreq"] << 7, b["psn"] >> 16, b["psn"] & 0xFFFF)
    ext = b"".join(ext_bytes(n, v["ext_headers"][n]) for n in ORDER if n in v["ext_headers"])
    roce = bth + ext + pay + bytes(pad)
    ip, udp = v["ip"], v["udp"]
    ulen = 8 + len(roce) + 4
    src = ipaddress.ip_address(ip["src"]).packed
    dst = ipaddress.ip_address(ip["dst"]).packed
    if v["ip_version"] == 4:
        flags = 0x4000 if ip.get("df", 0) else 0
        hdr = struct.pack(">BBHHHBBH4s4s", 0x45, ip["tos_or_tclass"], 20 + ulen, ip.get("id", 0),
                          flags, ip["ttl_or_hop_limit"], 17, 0, src, dst)
        hdr = hdr[:10] + struct.pack(">H", ipv4_csum(hdr)) + hdr[12:]
        # masked: TOS, TTL, header checksum (roce-wire §9)
        mhdr = hdr[:1] + b"\xff" + hdr[2:8] + b"\xff" + hdr[9:10] + b"\xff\xff" + hdr[12:]
    else:
        vtf = 6 << 28 | ip["tos_or_tclass"] << 20 | ip.get("flow_label", 0)
        hdr = struct.pack(">IHBB16s16s", vtf, ulen, 17, ip["ttl_or_hop_limit"], src, dst)
        mhdr = struct.pack(">IHBB16s16s", 6 << 28 | 0x0FFFFFFF, ulen, 17, 0xFF, src, dst)
    uhdr = struct.pack(">HHHH", udp["sport"], udp["dport"], ulen, udp["checksum"])
    muhdr = uhdr[:6] + b"\xff\xff"
    mroce = roce[:4] + b"\xff" + roce[5:]  # BTH byte 4 (FECN, BECN, reserved)
    icin = b"\xff" * 8 + mhdr + muhdr + mroce
    icrc = zlib.crc32(icin) & 0xFFFFFFFF
    return hdr + uhdr + roce + struct.pack("<I", icrc), icin, icrc


V4 = {"src": "192.168.1.1", "dst": "192.168.1.2", "tos_or_tclass": 0, "ttl_or_hop_limit": 64,
      "id": 0, "df": 1}
V6 = {"src": "2001:db8::1", "dst": "2001:db8::2", "tos_or_tclass": 0, "ttl_or_hop_limit": 64,
      "flow_label": 0}

XRC = [
    ("xrc_send_only_ipv4", "XRC SEND ONLY to SRQ 0x004001 on target QP 0x12, 5-byte payload",
     V4, 0xA4, "XRC_SEND_ONLY", {"XRCETH": {"srqn": "0x004001"}}, b"Hello", 0x000100, 1, 0),
    ("xrc_send_first_ipv4", "XRC SEND FIRST (PMTU 256): every packet of a message has the XRCETH",
     V4, 0xA0, "XRC_SEND_FIRST", {"XRCETH": {"srqn": "0x00abcd"}}, bytes(range(256)), 0x000200,
     0, 0),
    ("xrc_rdma_write_only_imm_ipv4", "XRC RDMA WRITE ONLY WITH IMMEDIATE: XRCETH, RETH, ImmDt",
     V4, 0xAB, "XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
     {"XRCETH": {"srqn": "0xfedcba"},
      "RETH": {"va": "0x00007f0000004000", "rkey": "0x00000abc", "dma_length": 8},
      "ImmDt": "0x00000001"}, b"12345678", 0x000300, 1, 1),
    ("xrc_rdma_read_request_ipv4", "XRC RDMA READ REQUEST: XRCETH then RETH",
     V4, 0xAC, "XRC_RDMA_READ_REQUEST",
     {"XRCETH": {"srqn": "0x000042"},
      "RETH": {"va": "0x00007f0000002000", "rkey": "0x00005678", "dma_length": 16}}, b"",
     0x000400, 1, 0),
    ("xrc_cmp_swap_ipv6", "XRC COMPARE SWAP over IPv6: XRCETH then AtomicETH (44 header bytes)",
     V6, 0xB3, "XRC_COMPARE_SWAP",
     {"XRCETH": {"srqn": "0x123456"},
      "AtomicETH": {"va": "0x00007f0000003000", "rkey": "0x00009abc",
                    "swap_add": "0x1111111111111111", "compare": "0x2222222222222222"}}, b"",
     0x000500, 1, 0),
    ("xrc_ack_ipv4", "XRC ACKNOWLEDGE: a response, the RC layout, no XRCETH",
     V4, 0xB1, "XRC_ACKNOWLEDGE", {"AETH": {"syndrome": "0x1f", "msn": 6}}, b"", 0x000100, 0, 0),
    ("xrc_read_response_only_ipv4", "XRC RDMA READ RESPONSE ONLY: AETH, no XRCETH",
     V4, 0xB0, "XRC_RDMA_READ_RESPONSE_ONLY", {"AETH": {"syndrome": "0x1f", "msn": 5}},
     b"sixteen bytes!!!", 0x000400, 0, 0),
]


def xrc_vector(name, desc, ip, op, opname, ext, pay, psn, ackreq, se):
    v = {
        "name": name, "description": desc, "ip_version": 4 if ip is V4 else 6, "ip": dict(ip),
        "udp": {"sport": 49458, "dport": 4791, "length": 0, "checksum": 0},
        "bth": {"opcode": op, "opcode_name": opname, "se": se, "m": 0,
                "padcnt": -len(pay) & 3, "tver": 0, "pkey": 65535, "byte4_resv8a": 0,
                "dest_qpn": 0x12, "ackreq": ackreq, "psn": psn},
        "ext_headers": ext, "payload_len": len(pay), "payload_hex": pay.hex(),
    }
    pkt, icin, icrc = build(v)
    hl = 20 if v["ip_version"] == 4 else 40
    v["udp"]["length"] = len(pkt) - hl
    pkt, icin, icrc = build(v)
    v["icrc_value"] = "0x%08x" % icrc
    v["icrc_wire_hex"] = struct.pack("<I", icrc).hex()
    v["icrc_input_hex"] = icin.hex()
    v["ip_packet_hex"] = pkt.hex()
    return v


def main():
    with open(sys.argv[1]) as f:
        known = json.load(f)
    for v in known:
        pkt, icin, icrc = build(v)
        if pkt.hex() != v["ip_packet_hex"] or icin.hex() != v["icrc_input_hex"] or \
                icrc != num(v["icrc_value"]):
            sys.exit("the builder does not reproduce %s" % v["name"])
    out = [xrc_vector(*x) for x in XRC]
    text = json.dumps(out, indent=1) + "\n"
    if sys.argv[3:] == ["--check"]:
        with open(sys.argv[2]) as f:
            if f.read() != text:
                sys.exit("%s is stale: re-run make_xrc_vectors.py" % sys.argv[2])
        print("%d known vectors reproduced, %s matches" % (len(known), sys.argv[2]))
        return
    with open(sys.argv[2], "w") as f:
        f.write(text)
    print("%d known vectors reproduced, %d XRC vectors written" % (len(known), len(out)))


if __name__ == "__main__":
    main()
