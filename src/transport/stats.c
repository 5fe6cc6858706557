/* Counter names (stats.h); shared by the library and tools/urvt-stat. */
#include <string.h>

#include "transport/stats.h"

#define DROP(r) [URVT_CTR_DROP_BASE + (r)]

const char *const urvt_ctr_name[URVT_CTR_NUM] = {
	[URVT_CTR_TX_PKTS] = "tx_packets",
	[URVT_CTR_TX_BYTES] = "tx_bytes",
	[URVT_CTR_RX_PKTS] = "rx_packets",
	[URVT_CTR_RX_BYTES] = "rx_bytes",
	[URVT_CTR_TX_ERRORS] = "tx_errors",
	[URVT_CTR_FWD_OUT] = "host_forwarded_out",
	[URVT_CTR_FWD_IN] = "host_forwarded_in",
	[URVT_CTR_FWD_LOST] = "host_forward_lost",
	[URVT_CTR_RETRANSMITS] = "retransmits",
	[URVT_CTR_TIMEOUTS] = "timeouts",
	[URVT_CTR_PROBES] = "tail_probes",
	[URVT_CTR_RETRY_EXC] = "retry_exceeded",
	[URVT_CTR_RNR_RETRY_EXC] = "rnr_retry_exceeded",
	[URVT_CTR_ACKS_SENT] = "acks_sent",
	[URVT_CTR_ACKS_RCVD] = "acks_received",
	[URVT_CTR_RNR_NAKS_SENT] = "rnr_naks_sent",
	[URVT_CTR_RNR_NAKS_RCVD] = "rnr_naks_received",
	[URVT_CTR_DUP_REQUESTS] = "duplicate_requests",
	[URVT_CTR_SEQ_ERRORS] = "sequence_errors",
	[URVT_CTR_NAK_SENT_SEQ] = "nak_sent_psn_seq",
	[URVT_CTR_NAK_SENT_INV] = "nak_sent_invalid_request",
	[URVT_CTR_NAK_SENT_ACCESS] = "nak_sent_remote_access",
	[URVT_CTR_NAK_SENT_OP] = "nak_sent_remote_op",
	[URVT_CTR_NAK_RCVD_SEQ] = "nak_received_psn_seq",
	[URVT_CTR_NAK_RCVD_INV] = "nak_received_invalid_request",
	[URVT_CTR_NAK_RCVD_ACCESS] = "nak_received_remote_access",
	[URVT_CTR_NAK_RCVD_OP] = "nak_received_remote_op",
	[URVT_CTR_FAULT_DROP] = "fault_drop",
	[URVT_CTR_FAULT_DUP] = "fault_dup",
	[URVT_CTR_FAULT_REORDER] = "fault_reorder",
	[URVT_CTR_FAULT_CORRUPT] = "fault_corrupt",
	[URVT_CTR_FAULT_DELAY] = "fault_delay",
	/* the links' slots (stats.h): the names the links give themselves */
	[URVT_CTR_LINK_TX(0)] = "udp_tx_packets",
	[URVT_CTR_LINK_RX(0)] = "udp_rx_packets",
	[URVT_CTR_LINK_TX(1)] = "shm_tx_packets",
	[URVT_CTR_LINK_RX(1)] = "shm_rx_packets",
	[URVT_CTR_CC_LOSS] = "cc_loss_cuts",
	[URVT_CTR_CC_DELAY] = "cc_delay_cuts",
	[URVT_CTR_CC_STALLS] = "cc_window_stalls",
	[URVT_CTR_CC_UNDO] = "cc_timeout_undos",
	[URVT_CTR_ACK_SKIPS] = "resend_skips",
	[URVT_CTR_XRC_BAD_SRQ] = "xrc_bad_srq",
	[URVT_CTR_OOO_HELD] = "ooo_held",
	[URVT_CTR_ACKS_WAITED] = "acks_waited",
	[URVT_CTR_ACKS_REPLACED] = "acks_replaced",
	[URVT_CTR_ACKS_COALESCED] = "acks_coalesced",
	[URVT_CTR_RX_LATE_NO_WRITE] = "rx_late_no_write",
	[URVT_CTR_COMP_DIRECT] = "comp_direct",
	[URVT_CTR_CMA_REFS_SENT] = "cma_refs_sent",
	[URVT_CTR_CMA_REF_BYTES] = "cma_ref_bytes",
	[URVT_CTR_CMA_PULLS] = "cma_pulls",
	[URVT_CTR_CMA_BYTES] = "cma_bytes",
	[URVT_CTR_CMA_FAILS] = "cma_fails",
	[URVT_CTR_CMA_PUSHES] = "cma_pushes",
	[URVT_CTR_CMA_PUSH_BYTES] = "cma_push_bytes",
	[URVT_CTR_CMA_PUSH_READS] = "cma_push_reads",
	[URVT_CTR_OOO_EXECUTED] = "ooo_executed",
	[URVT_CTR_RX_BY_APP] = "rx_datagrams_app",
	[URVT_CTR_RX_BY_PROGRESS] = "rx_datagrams_progress",
	[URVT_CTR_RX_APP_TAKES] = "rx_app_takes",
	[URVT_CTR_RX_GIVE_LEAVER] = "rx_given_back_leaver",
	[URVT_CTR_RX_GIVE_WATCHDOG] = "rx_given_back_watchdog",
	[URVT_CTR_RX_GIVE_BLOCKS] = "rx_given_back_blocking",
	[URVT_CTR_RX_WAITS] = "rx_event_waits",
	[URVT_CTR_RX_BY_WAITER] = "rx_by_event_waiter",
	DROP(URVT_DROP_NONE) = "drop_none",
	DROP(URVT_DROP_TRUNCATED) = "drop_truncated",
	DROP(URVT_DROP_BAD_TVER) = "drop_bad_tver",
	DROP(URVT_DROP_BAD_OPCODE) = "drop_bad_opcode",
	DROP(URVT_DROP_UNSUP_OPCODE) = "drop_unsupported_opcode",
	DROP(URVT_DROP_QPT_MISMATCH) = "drop_qp_type_mismatch",
	DROP(URVT_DROP_BAD_LENGTH) = "drop_bad_length",
	DROP(URVT_DROP_BAD_PAD) = "drop_bad_pad",
	DROP(URVT_DROP_BAD_PKEY) = "drop_bad_pkey",
	DROP(URVT_DROP_BAD_ICRC) = "drop_bad_icrc",
	DROP(URVT_DROP_BAD_IP) = "drop_bad_ip_header",
	DROP(URVT_DROP_BAD_UDP) = "drop_bad_udp_header",
	DROP(URVT_DROP_BAD_QPN) = "drop_bad_qpn",
	DROP(URVT_DROP_BAD_QKEY) = "drop_bad_qkey",
	DROP(URVT_DROP_NO_QP) = "drop_no_qp",
	DROP(URVT_DROP_BAD_ADDR) = "drop_bad_address",
	DROP(URVT_TDROP_BAD_STATE) = "drop_bad_qp_state",
	DROP(URVT_TDROP_NO_BUF) = "drop_no_buffer",
	DROP(URVT_TDROP_RXQ_FULL) = "drop_completer_queue_full",
	DROP(URVT_TDROP_OVERSIZE) = "drop_oversize",
	DROP(URVT_TDROP_MCAST) = "drop_multicast",
	DROP(URVT_TDROP_STALE_RESP) = "drop_stale_response",
	DROP(URVT_TDROP_BAD_RESP) = "drop_bad_response",
	DROP(URVT_TDROP_RESP_SILENT) = "drop_responder_silent",
};

int urvt_stats_link_slot(const char *link_name)
{
	size_t n = strlen(link_name);

	for (int s = 0; s < URVT_STATS_LINKS; s++) {
		const char *tx = urvt_ctr_name[URVT_CTR_LINK_TX(s)];
		if (!strncmp(tx, link_name, n) && !strcmp(tx + n, "_tx_packets"))
			return s;
	}
	return -1;
}
