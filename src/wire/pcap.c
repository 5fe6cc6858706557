// SPDX-License-Identifier: MIT
/* pcap trace writer; not on the hot path (docs/wire.md "Tracing"). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "wire/hdr.h"
#include "wire/pcap.h"

#define PCAP_MAGIC_US 0xa1b2c3d4u
#define SLL_BYTES 16
#define SLL_INCOMING 0 /* "sent to us" */
#define SLL_OUTGOING 4 /* "sent by us" */
#define ARPHRD_ETHER_ 1

struct urvt_pcap {
	pthread_mutex_t lock; /* guards fd writes and count */
	int fd;
	uint64_t count;
};

/* pcap headers are in the writer's byte order; readers detect it by the magic */
struct pcap_file_hdr {
	uint32_t magic;
	uint16_t major, minor;
	int32_t thiszone;
	uint32_t sigfigs, snaplen, linktype;
};

struct pcap_rec_hdr {
	uint32_t sec, usec, caplen, len;
};

static int write_all(int fd, struct iovec *iov, int n)
{
	while (n > 0) {
		ssize_t w = writev(fd, iov, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		while (n > 0 && (size_t)w >= iov->iov_len) {
			w -= (ssize_t)iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (uint8_t *)iov->iov_base + w;
			iov->iov_len -= (size_t)w;
		}
	}
	return 0;
}

struct urvt_pcap *urvt_pcap_open(const char *path)
{
	struct pcap_file_hdr fh = {
		.magic = PCAP_MAGIC_US,
		.major = 2,
		.minor = 4,
		.snaplen = 0x40000,
		.linktype = URVT_PCAP_LINKTYPE_SLL,
	};
	struct urvt_pcap *pc = calloc(1, sizeof(*pc));
	int err;

	if (!pc)
		return NULL;
	pc->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (pc->fd < 0) {
		err = errno;
		goto err_free;
	}
	struct iovec iov = { .iov_base = &fh, .iov_len = sizeof(fh) };
	err = -write_all(pc->fd, &iov, 1);
	if (err)
		goto err_close;
	pthread_mutex_init(&pc->lock, NULL);
	return pc;

err_close:
	close(pc->fd);
err_free:
	free(pc);
	errno = err;
	return NULL;
}

int urvt_pcap_write(struct urvt_pcap *pc, enum urvt_pcap_dir dir, const struct urvt_ipinfo *ip,
		    const uint8_t *roce, size_t len)
{
	uint8_t sll[SLL_BYTES] = { 0 };
	uint8_t hdr[URVT_IPV6_HDR_BYTES + URVT_UDP_HDR_BYTES];
	struct pcap_rec_hdr rh;
	struct timespec ts;

	if (!pc)
		return 0;
	size_t hl = urvt_ip_udp_hdr_build(hdr, ip, len);
	if (!hl)
		return -EMSGSIZE;

	urvt_put_be16(sll, dir == URVT_PCAP_OUT ? SLL_OUTGOING : SLL_INCOMING);
	urvt_put_be16(sll + 2, ARPHRD_ETHER_);
	urvt_put_be16(sll + 4, 6);
	/* a locally administered MAC made from the sender's address, so flows can be told apart */
	sll[6] = 0x02;
	memcpy(sll + 8, ip->sgid + 12, 4);
	urvt_put_be16(sll + 14, urvt_ipinfo_is_v4(ip) ? 0x0800 : 0x86dd);

	clock_gettime(CLOCK_REALTIME, &ts);
	rh.sec = (uint32_t)ts.tv_sec;
	rh.usec = (uint32_t)(ts.tv_nsec / 1000);
	rh.caplen = rh.len = (uint32_t)(SLL_BYTES + hl + len);

	struct iovec iov[4] = {
		{ .iov_base = &rh, .iov_len = sizeof(rh) },
		{ .iov_base = sll, .iov_len = sizeof(sll) },
		{ .iov_base = hdr, .iov_len = hl },
		{ .iov_base = (void *)roce, .iov_len = len },
	};
	pthread_mutex_lock(&pc->lock);
	int err = write_all(pc->fd, iov, 4);
	if (!err)
		pc->count++;
	pthread_mutex_unlock(&pc->lock);
	return err;
}

uint64_t urvt_pcap_count(struct urvt_pcap *pc)
{
	uint64_t n;

	pthread_mutex_lock(&pc->lock);
	n = pc->count;
	pthread_mutex_unlock(&pc->lock);
	return n;
}

int urvt_pcap_close(struct urvt_pcap *pc)
{
	int err = 0;

	if (!pc)
		return 0;
	if (close(pc->fd))
		err = -errno;
	pthread_mutex_destroy(&pc->lock);
	free(pc);
	return err;
}
