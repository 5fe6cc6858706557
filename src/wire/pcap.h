/* SPDX-License-Identifier: MIT */
/*
 * Packet trace writer (URVT_PCAP=FILE). Writes classic pcap, link type
 * LINUX_SLL (113) so each record carries its direction, with the IPv4/IPv6
 * and UDP headers synthesised as on the wire (docs/wire.md), so Wireshark
 * and tshark decode the packets as RoCEv2 (UDP port 4791).
 *
 * Thread-safe: records are written whole under a mutex, one write per
 * record, so a crash loses at most the record in flight. Callers keep
 * tracing off the hot path with a single branch: if (pcap) urvt_pcap_write().
 */
#ifndef URVT_WIRE_PCAP_H
#define URVT_WIRE_PCAP_H

#include <stddef.h>
#include <stdint.h>

#include "wire/ip.h"

#define URVT_PCAP_LINKTYPE_SLL 113

enum urvt_pcap_dir {
	URVT_PCAP_IN,  /* received by urvt (SLL "to us") */
	URVT_PCAP_OUT, /* sent by urvt (SLL "outgoing") */
};

struct urvt_pcap;

/* Create/truncate path and write the file header. NULL + errno on failure. */
struct urvt_pcap *urvt_pcap_open(const char *path);

/*
 * Append one packet: roce is the UDP payload, BTH .. ICRC, len bytes. The
 * IP header uses ip as is: for sent packets ip_id 0 + DF (what the kernel
 * writes for urvt's socket), for received IPv4 packets the ID recovered by
 * urvt_icrc_check(). UDP checksum 0. Returns 0 or a negative errno.
 * pc == NULL is allowed and does nothing.
 */
int urvt_pcap_write(struct urvt_pcap *pc, enum urvt_pcap_dir dir, const struct urvt_ipinfo *ip,
		    const uint8_t *roce, size_t len);

/* Number of records written so far. */
uint64_t urvt_pcap_count(struct urvt_pcap *pc);

/* Close and free; returns 0 or a negative errno from close(). NULL is allowed. */
int urvt_pcap_close(struct urvt_pcap *pc);

#endif /* URVT_WIRE_PCAP_H */
