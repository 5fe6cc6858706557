// SPDX-License-Identifier: MIT
/*
 * ICRC and header-build throughput for 64 B and 4 KiB packets, beside
 * memcpy of the same sizes in the same run: urvt's CRC-32 (each
 * implementation this CPU has, wire/crc32.c) beside zlib and libdeflate.
 *
 *   icrc_bench [seconds per case, default 0.3]
 *
 * "ICRC" = the full roce-wire §9 computation as urvt does it: a 48-byte masked
 * prefix (8 x FF + IPv4 + UDP + BTH) then the rest of the packet in place.
 * "build+finish" = urvt_pkt_build_hdr + payload copy + urvt_pkt_finish
 * (pad + ICRC) with the CRC implementation the library picked.
 */
#include <arpa/inet.h>
#include <libdeflate.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#include "wire/hdr.h"
#include "wire/icrc.h"
#include "wire/ip.h"

static double secs = 0.3;
static volatile uint32_t sink;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Run fn until secs elapse; return ns per call. */
#define TIMEIT(ns_out, body)                                                               \
	do {                                                                               \
		uint64_t iters = 0, batch = 64;                                            \
		double t0 = now(), t;                                                      \
		do {                                                                       \
			for (uint64_t b_ = 0; b_ < batch; b_++) {                          \
				body;                                                      \
			}                                                                  \
			iters += batch;                                                    \
			t = now();                                                         \
		} while (t - t0 < secs);                                                   \
		ns_out = (t - t0) * 1e9 / (double)iters;                                   \
	} while (0)

static uint8_t prefix[48];

static uint32_t icrc_zlib(const uint8_t *p, size_t n)
{
	return (uint32_t)crc32(crc32(0, prefix, sizeof(prefix)), p, (uInt)n);
}

static uint32_t icrc_deflate(const uint8_t *p, size_t n)
{
	return libdeflate_crc32(libdeflate_crc32(0, prefix, sizeof(prefix)), p, n);
}

int main(int argc, char **argv)
{
	static uint8_t src[8192], dst[8192], pkt[8192];
	static const size_t sizes[] = { 64, 1040, 4096 };
	struct urvt_ipinfo ip;

	if (argc > 1)
		secs = atof(argv[1]);
	for (size_t i = 0; i < sizeof(src); i++)
		src[i] = (uint8_t)(i * 131 + 7);
	memset(prefix, 0xa5, sizeof(prefix));
	urvt_ipinfo_v4(&ip, inet_addr("10.0.0.1"), inet_addr("10.0.0.2"), 0xc001, 4791);

	static const char *const impls[] = { "table", "pclmul", "vpclmul", "vpclmul512" };
	const char *dflt = urvt_crc32_impl();

	printf("CRC-32 implementation in use: %s; %.2f s per case\n", dflt, secs);
	printf("%-6s %-34s %10s %10s\n", "size", "case", "ns/pkt", "GB/s");
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		size_t n = sizes[k]; /* bytes covered: BTH .. pad (UDP payload minus ICRC) */
		double ns;
		struct urvt_pkt f = { .opcode = URVT_OP_RC_SEND_ONLY, .pkey = 0xffff,
				      .dest_qpn = 0x12, .psn = 1, .ackreq = true,
				      .paylen = (uint32_t)(n - 12) };
#define ROW(name, bytes)                                                                   \
	printf("%-6zu %-34s %10.1f %10.2f\n", n, name, ns, (double)(bytes) / ns)

		TIMEIT(ns, { memcpy(dst, src + (b_ & 7), n); sink += dst[b_ & 63]; });
		ROW("memcpy", n);
		TIMEIT(ns, sink += (uint32_t)crc32(0, src + (b_ & 7), (uInt)n));
		ROW("crc32 zlib (raw)", n);
		TIMEIT(ns, sink += libdeflate_crc32(0, src + (b_ & 7), n));
		ROW("crc32 libdeflate (raw)", n);
		for (size_t i = 0; i < sizeof(impls) / sizeof(impls[0]); i++) {
			char name[64];
			if (urvt_crc32_use(impls[i]))
				continue;
			TIMEIT(ns, sink += urvt_crc32(0, src + (b_ & 7), n));
			snprintf(name, sizeof(name), "urvt_crc32 %s (raw)", impls[i]);
			ROW(name, n);
			TIMEIT(ns, sink += urvt_crc32_copy(0, dst, src + (b_ & 7), n));
			snprintf(name, sizeof(name), "urvt_crc32_copy %s", impls[i]);
			ROW(name, n);
		}
		urvt_crc32_use(dflt);
		TIMEIT(ns, sink += icrc_zlib(src + (b_ & 7), n));
		ROW("ICRC via zlib", n);
		TIMEIT(ns, sink += icrc_deflate(src + (b_ & 7), n));
		ROW("ICRC via libdeflate", n);
		TIMEIT(ns, sink += urvt_icrc_v4(0x0100000a, 0x0200000a, 0, true, 0xc001, 4791,
						src + (b_ & 7), n));
		ROW("urvt_icrc_v4", n);
		TIMEIT(ns, {
			f.psn = (uint32_t)b_;
			size_t h = urvt_pkt_build_hdr(pkt, sizeof(pkt), &f);
			memcpy(pkt + h, src, f.paylen);
			sink += (uint32_t)urvt_pkt_finish(pkt, sizeof(pkt), h + f.paylen, &ip);
		});
		ROW("build_hdr+copy+finish", n);
		TIMEIT(ns, {
			f.psn = (uint32_t)b_;
			sink += (uint32_t)urvt_pkt_build_hdr(pkt, sizeof(pkt), &f);
		});
		ROW("build_hdr only (GB/s of packet)", n);

		/* a finished packet with ID 0x1234, verified as a UDP socket would */
		struct urvt_ipinfo sip = ip;
		sip.ip_id = 0x1234;
		size_t h = urvt_pkt_build_hdr(pkt, sizeof(pkt), &f);
		memcpy(pkt + h, src, f.paylen);
		size_t total = urvt_pkt_finish(pkt, sizeof(pkt), h + f.paylen, &sip);
		struct urvt_pkt p;
		TIMEIT(ns, sink += (uint32_t)urvt_pkt_parse(pkt, total, &p));
		ROW("urvt_pkt_parse", total);
		TIMEIT(ns, {
			struct urvt_ipinfo r = ip;
			sink += (uint32_t)urvt_icrc_check(&r, pkt, total, 0);
		});
		ROW("icrc_check, ID known (fails)", total);
		TIMEIT(ns, {
			struct urvt_ipinfo r = ip;
			sink += (uint32_t)urvt_icrc_check(&r, pkt, total, URVT_ICRC_V4_ID_UNKNOWN);
		});
		ROW("icrc_check, ID unknown (recover)", total);
		TIMEIT(ns, sink += urvt_gf2_mulmod((uint32_t)b_, urvt_gf2_xinv8((uint32_t)b_ & 0xffff)));
		printf("%-6zu %-34s %10.1f %10s\n", n, "  of which: shift (2+1 mulmod)", ns, "-");
	}
	return sink == 0x12345678 ? 1 : 0;
}
