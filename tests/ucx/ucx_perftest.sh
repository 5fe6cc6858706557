#!/bin/sh
# ucx_perftest.sh WHERE SLOT TLS TEST [ARGS...]
#
# Debian's UCX (ucx-utils' ucx_perftest, libucx0 1.13) over urvt: a server
# and a client process, each through urvt-run, with UCX_NET_DEVICES=urvt0:1
# and UCX_TLS=TLS (rc_verbs,ud_verbs:aux: RC carries the data, UD only the
# wire-up; ud_verbs: UD alone).
#   WHERE=host     127.252.SLOT.1 and .2: the shared-memory link carries it
#   WHERE=hostudp  the same with URVT_SHM=0: UDP
#   WHERE=netns    two network namespaces joined by a veth pair,
#                  10.(200+SLOT).0.1/24 and .2/24: UDP
# Passes when both exit 0, the client prints its "Final:" row, and urvt's
# counters show the traffic on the expected link and QP type (RC QPs for
# rc_verbs, UD only for ud_verbs). Exit 77 without ucx_perftest, or for
# netns without root.
set -u
where=$1 slot=$2 tls=$3 test=$4
shift 4
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/netns.sh"
run=${URVT_RUN:-$here/../../build/bin/urvt-run}
stat=${URVT_STAT:-$(dirname "$run")/urvt-stat}
command -v ucx_perftest >/dev/null || { echo "SKIP: ucx_perftest (ucx-utils) missing"; exit 77; }
port=$((13400 + slot))
tmo=${UCX_TEST_TIMEOUT:-60}
out=$(mktemp -d)
a=urvt-ua$slot b=urvt-ub$slot
cleanup() {
	[ -n "${spid:-}" ] && kill "$spid" 2>/dev/null
	[ "$where" = netns ] && netns_del "$a" "$b"
	rm -rf "$out"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

env_common="UCX_NET_DEVICES=urvt0:1 UCX_TLS=$tls UCX_WARN_UNUSED_ENV_VARS=n"
case $where in
netns)
	net=10.$((200 + slot))
	netns_pair "$a" "$b" "uva$slot" "uvb$slot" "$net.0"
	saddr=$net.0.1
	sexec="ip netns exec $a env URVT_NETDEV=uva$slot"
	cexec="ip netns exec $b env URVT_NETDEV=uvb$slot"
	link=udp
	;;
host | hostudp)
	saddr=127.252.$slot.1
	sexec="env URVT_ADDR=$saddr"
	cexec="env URVT_ADDR=127.252.$slot.2"
	link=shm
	if [ "$where" = hostudp ]; then
		sexec="$sexec URVT_SHM=0" cexec="$cexec URVT_SHM=0" link=udp
	fi
	;;
*)
	echo "usage: $0 host|hostudp|netns SLOT TLS TEST [ARGS...]"
	exit 2
	;;
esac

# shellcheck disable=SC2086
timeout "$tmo" $sexec $env_common URVT_STATS_FILE="$out/stats.server" \
	"$run" ucx_perftest -p "$port" -t "$test" "$@" >"$out/server" 2>&1 &
spid=$!
sleep 0.5
for try in 1 2 3 4 5 6; do
	# shellcheck disable=SC2086
	timeout "$tmo" $cexec $env_common URVT_STATS_FILE="$out/stats.client" \
		"$run" ucx_perftest -p "$port" -t "$test" "$@" "$saddr" >"$out/client" 2>&1
	crc=$?
	grep -q "connect() failed" "$out/client" || break
	sleep 0.5
done
wait "$spid"
src=$?
spid=
echo "--- server: exit $src"; cat "$out/server"
echo "--- client: exit $crc"; cat "$out/client"
fail=0
[ "$src" = 0 ] && [ "$crc" = 0 ] || { echo "FAIL: exit codes server=$src client=$crc"; fail=1; }
grep -q "^Final:" "$out/client" || { echo "FAIL: no Final: row"; fail=1; }

# Which link and which QPs carried it (urvt-stat: device table, then one
# table per QP headed "qp N (TYPE)").
for side in server client; do
	f=$out/stats.$side
	[ -f "$f" ] || { echo "FAIL: no counters for the $side"; fail=1; continue; }
	"$stat" -a "$f" >"$out/stat.$side"
	ctr() { awk -v c="$1" '/^  qp /{exit} $1 == c { print $2 }' "$out/stat.$side"; }
	ut=$(ctr udp_tx_packets) st=$(ctr shm_tx_packets)
	# packets each QP type sent
	rc=$(awk '/^  qp .*\(RC\)/{t=1;next} /^  qp /{t=0} t && $1=="tx_packets"{n+=$2} END{print n+0}' "$out/stat.$side")
	ud=$(awk '/^  qp .*\(UD\)/{t=1;next} /^  qp /{t=0} t && $1=="tx_packets"{n+=$2} END{print n+0}' "$out/stat.$side")
	echo "links: $side udp_tx $ut shm_tx $st; RC QPs sent $rc, UD QPs sent $ud (want $link)"
	if [ "$link" = shm ]; then
		# a UD QP's first datagrams to a process sharing our GID go over
		# UDP while the shm link connects to it (docs/shm.md, links.sh)
		[ "$st" -gt 0 ] && [ "$ut" -le $((3 * st)) ] || { echo "FAIL: $side not over shm"; fail=1; }
	else
		[ "$ut" -gt 0 ] && [ "$st" = 0 ] || { echo "FAIL: $side not all over UDP"; fail=1; }
	fi
	case $tls in
	rc_verbs*) [ "$rc" -gt "$ud" ] || { echo "FAIL: $side: RC did not carry the data"; fail=1; } ;;
	ud_verbs) [ "$rc" = 0 ] && [ "$ud" -gt 0 ] || { echo "FAIL: $side: not UD alone"; fail=1; } ;;
	esac
done
[ $fail = 0 ] && echo "PASS: ucx_perftest -t $test $* over $tls ($where)"
exit $fail
