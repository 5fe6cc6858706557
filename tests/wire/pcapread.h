/* SPDX-License-Identifier: MIT */
/* Minimal classic-pcap reader for the tests (Ethernet, Linux SLL, raw IP). */
#ifndef URVT_TEST_PCAPREAD_H
#define URVT_TEST_PCAPREAD_H

#include <stddef.h>
#include <stdint.h>

struct pcapr {
	uint8_t *buf;
	size_t len, off;
	int swap;
	uint32_t linktype;
};

struct pcapr_pkt {
	const uint8_t *ip; /* IP header; NULL if the frame is not IPv4/IPv6 */
	size_t len;	   /* bytes from ip to the end of the captured frame */
	int sll_pkttype;   /* Linux SLL packet type, -1 for other link types */
};

/* 0, or -1 with a message on stderr. */
int pcapr_open(struct pcapr *r, const char *path);
/* 1 = packet, 0 = end, -1 = malformed. */
int pcapr_next(struct pcapr *r, struct pcapr_pkt *p);
void pcapr_close(struct pcapr *r);

#endif
