// SPDX-License-Identifier: MIT
/* The pcap trace writer: concurrent writers, read back record by record. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "pcapread.h"
#include "testlib.h"
#include "wire/icrc.h"
#include "wire/pcap.h"

#define THREADS 4
#define PER_THREAD 500

static struct urvt_pcap *pc;

static void *writer(void *arg)
{
	uintptr_t t = (uintptr_t)arg;

	for (uint32_t i = 0; i < PER_THREAD; i++) {
		struct urvt_pkt f;
		struct urvt_ipinfo ip;
		uint8_t buf[512];

		tl_ipinfo(&ip, (int)(t & 1));
		tl_fields(&f, URVT_OP_RC_SEND_ONLY, i % 300, i);
		f.dest_qpn = 0x100 + (uint32_t)t; /* who wrote it */
		f.psn = i;			   /* in which order */
		size_t n = tl_build(buf, sizeof(buf), &f, &ip);
		if (!n || urvt_pcap_write(pc, (t & 2) ? URVT_PCAP_IN : URVT_PCAP_OUT, &ip, buf, n))
			return (void *)1;
	}
	return NULL;
}

static void test_concurrent_writers(void **state)
{
	(void)state;
	char path[] = "/tmp/urvt-wire-pcap-XXXXXX";
	int fd = mkstemp(path);
	pthread_t th[THREADS];

	assert_true(fd >= 0);
	close(fd);
	pc = urvt_pcap_open(path);
	assert_non_null(pc);
	for (uintptr_t t = 0; t < THREADS; t++)
		assert_int_equal(pthread_create(&th[t], NULL, writer, (void *)t), 0);
	for (int t = 0; t < THREADS; t++) {
		void *ret;
		assert_int_equal(pthread_join(th[t], &ret), 0);
		assert_null(ret);
	}
	assert_int_equal(urvt_pcap_count(pc), THREADS * PER_THREAD);
	assert_int_equal(urvt_pcap_close(pc), 0);

	struct pcapr r;
	struct pcapr_pkt pp;
	uint32_t next_psn[THREADS] = { 0 };
	int n = 0, rc;
	assert_int_equal(pcapr_open(&r, path), 0);
	assert_int_equal(r.linktype, URVT_PCAP_LINKTYPE_SLL);
	while ((rc = pcapr_next(&r, &pp)) == 1) {
		struct urvt_ipinfo ip;
		const uint8_t *roce;
		size_t rlen;
		struct urvt_pkt p;

		assert_non_null(pp.ip);
		assert_int_equal(urvt_ip_parse(pp.ip, pp.len, &ip, &roce, &rlen), 0);
		assert_int_equal(rlen + (size_t)(roce - pp.ip), pp.len);
		assert_int_equal(urvt_pkt_parse(roce, rlen, &p), 0);
		unsigned t = p.dest_qpn - 0x100;
		assert_true(t < THREADS);
		assert_int_equal(urvt_ipinfo_is_v4(&ip), !(t & 1));
		assert_int_equal(pp.sll_pkttype, (t & 2) ? 0 : 4);
		assert_int_equal(p.psn, next_psn[t]++);
		assert_int_equal(urvt_icrc_check(&ip, roce, rlen, 0), 0);
		if (urvt_ipinfo_is_v4(&ip)) {
			assert_int_equal(ip.ip_id, 0); /* what the kernel writes for our socket */
			assert_true(ip.df);
			assert_int_equal(urvt_ipv4_csum(pp.ip), urvt_get_be16(pp.ip + 10));
		}
		n++;
	}
	assert_int_equal(rc, 0);
	assert_int_equal(n, THREADS * PER_THREAD);
	pcapr_close(&r);
	unlink(path);
}

static void test_null_and_errors(void **state)
{
	(void)state;
	struct urvt_ipinfo ip;
	uint8_t b[16] = { 0 };

	tl_ipinfo(&ip, 0);
	assert_int_equal(urvt_pcap_write(NULL, URVT_PCAP_OUT, &ip, b, sizeof(b)), 0);
	assert_int_equal(urvt_pcap_close(NULL), 0);
	assert_null(urvt_pcap_open("/nonexistent-dir/x.pcap"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_concurrent_writers),
		cmocka_unit_test(test_null_and_errors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
