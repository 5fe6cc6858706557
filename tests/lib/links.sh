# Sourced by the two-process client tests: which link carried the traffic.
#
#   links_env DIR NAME   -> prints env assignments that keep NAME's counter file
#   links_check DIR NAME WANT   WANT = shm | udp: NAME sent or received
#                        packets, all over that link (urvt-stat's per-link
#                        counters; a UC/UD receiver sends nothing); prints
#                        them, returns 1 if not. WANT=shm with LINKS_UD=1:
#                        a UD sender's first datagrams to a process sharing
#                        its GID go over UDP while the shm link connects to
#                        that process (docs/shm.md), its progress thread
#                        connecting meanwhile: on a loaded machine (ASan) up to
#                        44 % of a 1000-message stream; passes once shm carries
#                        its share (at least a quarter).
links_stat=${URVT_STAT:-$(dirname "${run:-}")/urvt-stat}

links_env() {
	echo "URVT_STATS_FILE=$1/stats.$2"
}

links_ctr() { # FILE COUNTER
	"$links_stat" -a -q "$1" 2>/dev/null | awk -v c="$2" '$1 == c { print $2; f = 1 } END { if (!f) print 0 }'
}

links_check() {
	f=$1/stats.$2 want=$3
	if [ ! -x "$links_stat" ] || [ ! -f "$f" ]; then
		echo "links: no counters for $2 ($f)"
		return 1
	fi
	ut=$(links_ctr "$f" udp_tx_packets) ur=$(links_ctr "$f" udp_rx_packets)
	st=$(links_ctr "$f" shm_tx_packets) sr=$(links_ctr "$f" shm_rx_packets)
	echo "links: $2 udp tx $ut rx $ur, shm tx $st rx $sr (want $want)"
	if [ "$want" = shm ] && [ "${LINKS_UD:-0}" = 1 ]; then
		[ $((st + sr)) -gt 0 ] && [ $((ut + ur)) -le $((3 * (st + sr))) ]
	elif [ "$want" = shm ]; then
		# nothing sent over UDP; what it received there may be another
		# process's: every urvt process of the host shares its RoCE port
		# (docs/host-identity.md), and a datagram for a QPN that a process
		# gone since had lands at whoever has its slot now (seen once: a
		# full suite's vt_wr_api_memcheck_path_shm, beside tgtd's tests)
		[ "$ur" -gt 0 ] && echo "links: $2 received $ur datagram(s) over UDP, sent none"
		[ $((st + sr)) -gt 0 ] && [ "$ut" -eq 0 ]
	else
		[ $((ut + ur)) -gt 0 ] && [ $((st + sr)) -eq 0 ]
	fi
}
