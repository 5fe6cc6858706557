// SPDX-License-Identifier: MIT
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pcapread.h"

static uint32_t rd32(const struct pcapr *r, const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return r->swap ? __builtin_bswap32(v) : v;
}

int pcapr_open(struct pcapr *r, const char *path)
{
	FILE *f = fopen(path, "rb");
	uint32_t magic;

	memset(r, 0, sizeof(*r));
	if (!f) {
		perror(path);
		return -1;
	}
	fseek(f, 0, SEEK_END);
	long sz = ftell(f);
	fseek(f, 0, SEEK_SET);
	r->buf = malloc(sz > 0 ? (size_t)sz : 1);
	if (!r->buf || sz < 24 || fread(r->buf, 1, (size_t)sz, f) != (size_t)sz) {
		fprintf(stderr, "%s: short or unreadable pcap\n", path);
		fclose(f);
		free(r->buf);
		return -1;
	}
	fclose(f);
	r->len = (size_t)sz;
	memcpy(&magic, r->buf, 4);
	if (magic == 0xa1b2c3d4u || magic == 0xa1b23c4du) {
		r->swap = 0;
	} else if (magic == 0xd4c3b2a1u || magic == 0x4d3cb2a1u) {
		r->swap = 1;
	} else {
		fprintf(stderr, "%s: not a classic pcap (pcapng? use dumpcap -P)\n", path);
		free(r->buf);
		return -1;
	}
	r->linktype = rd32(r, r->buf + 20);
	r->off = 24;
	return 0;
}

int pcapr_next(struct pcapr *r, struct pcapr_pkt *p)
{
	if (r->off == r->len)
		return 0;
	if (r->len - r->off < 16)
		return -1;
	uint32_t caplen = rd32(r, r->buf + r->off + 8);
	const uint8_t *fr = r->buf + r->off + 16;
	if (caplen > r->len - r->off - 16)
		return -1;
	r->off += 16 + (size_t)caplen;

	size_t hl;
	uint16_t etype;
	p->sll_pkttype = -1;
	switch (r->linktype) {
	case 1: /* Ethernet */
		if (caplen < 14)
			return -1;
		hl = 14;
		etype = (uint16_t)(fr[12] << 8 | fr[13]);
		break;
	case 113: /* Linux cooked */
		if (caplen < 16)
			return -1;
		hl = 16;
		p->sll_pkttype = fr[0] << 8 | fr[1];
		etype = (uint16_t)(fr[14] << 8 | fr[15]);
		break;
	case 101: /* raw IP */
		hl = 0;
		etype = caplen && (fr[0] >> 4) == 6 ? 0x86dd : 0x0800;
		break;
	default:
		return -1;
	}
	p->ip = (etype == 0x0800 || etype == 0x86dd) ? fr + hl : NULL;
	p->len = caplen - hl;
	return 1;
}

void pcapr_close(struct pcapr *r)
{
	free(r->buf);
	r->buf = NULL;
}
