/*
 * rdma_getaddrinfo / rdma_freeaddrinfo (rdma_getaddrinfo(3)): getaddrinfo
 * with the rdma_cm's hints (port space, QP type) mapped to socket types and
 * protocols and back. No ibacm: a non-passive result carries no route, so
 * rdma_create_ep resolves it like rdma_resolve_route. Errors are
 * getaddrinfo's EAI_* codes, or -1 with errno, as in librdmacm.
 */
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>

#include "rdmacm/cma_priv.h"

static void hints_to_ai(const struct rdma_addrinfo *rai, struct addrinfo *ai)
{
	memset(ai, 0, sizeof(*ai));
	if (rai->ai_flags & RAI_PASSIVE)
		ai->ai_flags = AI_PASSIVE;
	if (rai->ai_flags & RAI_NUMERICHOST)
		ai->ai_flags |= AI_NUMERICHOST;
	if (rai->ai_family != AF_IB)
		ai->ai_family = rai->ai_family;
	switch (rai->ai_qp_type) {
	case IBV_QPT_RC:
	case IBV_QPT_UC:
	case IBV_QPT_XRC_SEND:
	case IBV_QPT_XRC_RECV:
		ai->ai_socktype = SOCK_STREAM;
		break;
	case IBV_QPT_UD:
		ai->ai_socktype = SOCK_DGRAM;
		break;
	default:
		break;
	}
	switch (rai->ai_port_space) {
	case RDMA_PS_TCP:
		ai->ai_protocol = IPPROTO_TCP;
		break;
	case RDMA_PS_IPOIB:
	case RDMA_PS_UDP:
		ai->ai_protocol = IPPROTO_UDP;
		break;
	case RDMA_PS_IB:
		ai->ai_protocol = ai->ai_socktype == SOCK_STREAM ? IPPROTO_TCP :
				  ai->ai_socktype == SOCK_DGRAM ? IPPROTO_UDP : 0;
		break;
	default:
		break;
	}
}

static int copy_addr(struct sockaddr **dst, socklen_t *dst_len, const struct sockaddr *src,
		     socklen_t len)
{
	*dst = malloc(len);
	if (!*dst) {
		errno = ENOMEM;
		return -1;
	}
	memcpy(*dst, src, len);
	*dst_len = len;
	return 0;
}

static int ai_to_rai(struct rdma_addrinfo *rai, const struct rdma_addrinfo *hints,
		     const struct addrinfo *ai)
{
	rai->ai_qp_type = hints->ai_qp_type ? hints->ai_qp_type :
			  ai->ai_socktype == SOCK_STREAM ? IBV_QPT_RC :
			  ai->ai_socktype == SOCK_DGRAM ? IBV_QPT_UD : 0;
	rai->ai_port_space = hints->ai_port_space ? hints->ai_port_space :
			     ai->ai_protocol == IPPROTO_TCP ? RDMA_PS_TCP :
			     ai->ai_protocol == IPPROTO_UDP ? RDMA_PS_UDP : 0;
	rai->ai_family = ai->ai_family;
	if (ai->ai_flags & AI_PASSIVE) {
		rai->ai_flags = RAI_PASSIVE;
		if (ai->ai_canonname)
			rai->ai_src_canonname = strdup(ai->ai_canonname);
		return copy_addr(&rai->ai_src_addr, &rai->ai_src_len, ai->ai_addr, ai->ai_addrlen);
	}
	if (ai->ai_canonname)
		rai->ai_dst_canonname = strdup(ai->ai_canonname);
	return copy_addr(&rai->ai_dst_addr, &rai->ai_dst_len, ai->ai_addr, ai->ai_addrlen);
}

int rdma_getaddrinfo(const char *node, const char *service, const struct rdma_addrinfo *hints,
		     struct rdma_addrinfo **res)
{
	static const struct rdma_addrinfo nohints;
	struct rdma_addrinfo *rai;
	int ret = 0;

	if (!service && !node && !hints) {
		errno = EINVAL;
		return -1;
	}
	if ((hints && (hints->ai_flags & RAI_FAMILY) && hints->ai_family == AF_IB)) {
		errno = EAFNOSUPPORT; /* no AF_IB on RoCE */
		return -1;
	}
	rai = calloc(1, sizeof(*rai));
	if (!rai) {
		errno = ENOMEM;
		return -1;
	}
	if (node || service) {
		struct addrinfo aih, *ai;

		if (hints)
			hints_to_ai(hints, &aih);
		ret = getaddrinfo(node, service, hints ? &aih : NULL, &ai);
		if (ret)
			goto err;
		ret = ai_to_rai(rai, hints ? hints : &nohints, ai);
		freeaddrinfo(ai);
	} else {
		rai->ai_flags = hints->ai_flags;
		rai->ai_family = hints->ai_family;
		rai->ai_qp_type = hints->ai_qp_type;
		rai->ai_port_space = hints->ai_port_space;
		if (hints->ai_dst_len)
			ret = copy_addr(&rai->ai_dst_addr, &rai->ai_dst_len, hints->ai_dst_addr,
					hints->ai_dst_len);
	}
	if (ret)
		goto err;
	if (!rai->ai_src_len && hints && hints->ai_src_len) {
		ret = copy_addr(&rai->ai_src_addr, &rai->ai_src_len, hints->ai_src_addr,
				hints->ai_src_len);
		if (ret)
			goto err;
	}
	*res = rai;
	return 0;
err:
	rdma_freeaddrinfo(rai);
	return ret;
}

void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *rai = res;

		res = res->ai_next;
		free(rai->ai_connect);
		free(rai->ai_route);
		free(rai->ai_src_canonname);
		free(rai->ai_dst_canonname);
		free(rai->ai_src_addr);
		free(rai->ai_dst_addr);
		free(rai);
	}
}
