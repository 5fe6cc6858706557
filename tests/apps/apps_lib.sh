# Shared by the tests/apps scripts (sourced): paths, a scratch directory,
# bounded waits and the urvt counter check.
run=${URVT_RUN:-$here/../../build/bin/urvt-run}
stat=${URVT_STAT:-$(dirname "$run")/urvt-stat}
tmo=${APPS_TIMEOUT:-60}
out=$(mktemp -d)
fail=0

skip_without() {
	for p in "$@"; do
		command -v "$p" >/dev/null || { echo "SKIP: $p not installed"; exit 77; }
	done
}

bad() {
	echo "FAIL: $*"
	fail=1
}

# wait_for FILE PATTERN SECONDS: until FILE has a line matching PATTERN
wait_for() {
	i=0
	while [ $i -lt $(($3 * 10)) ]; do
		grep -q "$2" "$1" 2>/dev/null && return 0
		sleep 0.1
		i=$((i + 1))
	done
	return 1
}

# counter FILE NAME: a device-wide counter from a URVT_STATS_FILE
counter() {
	"$stat" -a "$1" | awk -v c="$2" '/^  qp /{exit} $1 == c { print $2; exit }'
}

# check_stats WHO FILE MIN_TX_BYTES: the process wrote its counters and sent
# at least MIN_TX_BYTES over urvt (READ data answered by reference included:
# docs/shm.md "Single copy")
check_stats() {
	[ -s "$2" ] || { bad "$1: no urvt counters ($2): did it run over urvt?"; return; }
	txp=$(counter "$2" tx_packets) txb=$(counter "$2" tx_bytes) rxb=$(counter "$2" rx_bytes)
	refb=$(counter "$2" cma_ref_bytes)
	echo "urvt $1: tx_packets ${txp:-0} tx_bytes ${txb:-0} rx_bytes ${rxb:-0} by reference ${refb:-0}"
	[ "${txp:-0}" -gt 0 ] || bad "$1 sent no packets over urvt"
	txb=$((${txb:-0} + ${refb:-0}))
	[ "$txb" -ge "$3" ] || bad "$1 sent $txb bytes over urvt, expected >= $3"
}

# check_gid WHO FILE ADDR: the process's device had the identity ADDR (the
# first line of urvt-stat: "pid N  urvt0  ADDR (IF)")
check_gid() {
	[ -s "$2" ] || { bad "$1: no urvt counters ($2)"; return; }
	l=$("$stat" -a "$2" | head -1)
	echo "urvt $1: $l"
	case " $l " in *" $3 "*) ;; *) bad "$1's device is not $3's identity: $l" ;; esac
}

# tgt_setup IQN LUN_FILE INITIATOR: with the caller's adm() (tgtadm on its
# tgtd's control socket, --lld iser), wait up to 10 s for tgtd, then make
# target 1, IQN, with LUN 1 on LUN_FILE, bound to every address and to the
# initiator's name (tgt 1.0.85's iSER login needs both: docs/ecosystem.md,
# the tgtd section). Fails if tgtadm does.
tgt_setup() {
	i=0
	until adm --mode target --op show >/dev/null 2>&1 || [ $i -ge 100 ]; do
		sleep 0.1; i=$((i + 1))
	done
	adm --mode target --op new --tid 1 --targetname "$1" &&
		adm --mode logicalunit --op new --tid 1 --lun 1 --backing-store "$2" &&
		adm --mode target --op bind --tid 1 --initiator-address ALL &&
		adm --mode target --op bind --tid 1 --initiator-name "$3"
}
