#!/bin/sh
# perftest.sh SLOT PROG [ARGS...]
#
# Runs an unmodified perftest binary (Debian's perftest: ib_write_bw,
# ib_send_lat, ...) over urvt: a server process and a client process on this
# host, each through urvt-run, each with its own urvt device address
# (127.<100+SLOT>.0.1 server, .0.2 client) and a per-slot TCP port for
# perftest's out-of-band exchange.
#   server: PROG -F -d urvt0 -x 0 ARGS -p PORT
#   client: PROG -F -d urvt0 -x 0 ARGS -p PORT SERVER_IP
# SLOT (1..150) keeps parallel tests apart (addresses, TCP port).
# PERFTEST_LINK=shm (default: the shared-memory link carries it) or udp
# (URVT_SHM=0). Passes when both exit 0, the client printed the results
# table (the "#bytes" header followed by at least one data row), a server
# that prints a table (the BW tests) printed a data row too, and both sides'
# counters show every packet on that link.
set -u
slot=$1 prog=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
run=${URVT_RUN:-$here/../../build/bin/urvt-run}
link=${PERFTEST_LINK:-shm}
. "$here/../lib/links.sh"
# UD: the first datagrams to a new peer process may go over UDP (links.sh)
case " $* " in *" -c UD "*) export LINKS_UD=1 ;; esac
port=$((19000 + slot))
tmo=${PERFTEST_TIMEOUT:-90}
out=$(mktemp -d)
trap 'cleanup' EXIT INT TERM

cleanup() {
	[ -n "${spid:-}" ] && kill "$spid" 2>/dev/null
	rm -rf "$out"
}

if ! command -v "$prog" >/dev/null; then
	echo "SKIP: $prog not installed (apt-get install perftest)"
	exit 77
fi

saddr=127.$((100 + slot)).0.1 caddr=127.$((100 + slot)).0.2
common="-F -d urvt0 -x 0"
shm=1
[ "$link" = udp ] && shm=0

# Another run of this suite (another build tree) may hold the slot's
# addresses or port: wait for them to be free (bounded) rather than collide.
slot_busy() {
	command -v ss >/dev/null || return 1
	ss -Hlnu 2>/dev/null | grep -qE " ($saddr|$caddr):4791 " && return 0
	ss -Hlnt "sport = :$port" 2>/dev/null | grep -q .
}
for i in $(seq 1 60); do
	slot_busy || break
	[ "$i" = 1 ] && echo "slot $slot busy (127.$((100 + slot)).0.x:4791 or TCP $port), waiting"
	sleep 0.5
done

# shellcheck disable=SC2086
URVT_SHM=$shm URVT_STATS_FILE=$out/stats.server URVT_ADDR=$saddr timeout "$tmo" "$run" "$prog" $common "$@" -p "$port" >"$out/server" 2>&1 &
spid=$!
# The server listens on its TCP port once its resources are ready: wait
# for that (up to 3 s; a fixed 0.3 s was most of a short run), then retry
# the client while the connection is refused.
for i in $(seq 1 60); do
	ss -Hlnt "sport = :$port" 2>/dev/null | grep -q . && break
	kill -0 "$spid" 2>/dev/null || break
	sleep 0.05
done
rc=1
for try in 1 2 3 4 5 6 7 8; do
	# shellcheck disable=SC2086
	URVT_SHM=$shm URVT_STATS_FILE=$out/stats.client URVT_ADDR=$caddr timeout "$tmo" "$run" "$prog" $common "$@" -p "$port" "$saddr" \
		>"$out/client" 2>&1
	rc=$?
	grep -q "Couldn't connect\|Unable to open file descriptor for socket connection" \
		"$out/client" || break
	kill -0 "$spid" 2>/dev/null || break
	sleep 0.5
done
wait "$spid"
src=$?
spid=
echo "--- server ($saddr): exit $src"; cat "$out/server"
echo "--- client ($caddr): exit $rc"; cat "$out/client"

# has_table FILE: the "#bytes" header, then a line that starts with a number
has_table() {
	awk '/#bytes/ { hdr = 1; next } hdr && /^ *[0-9]+ +[0-9]/ { row = 1 } END { exit !row }' "$1"
}

if [ "$src" -ne 0 ] || [ "$rc" -ne 0 ]; then
	echo "FAIL: exit codes server=$src client=$rc"
	exit 1
fi
if ! has_table "$out/client"; then
	echo "FAIL: client printed no results table (#bytes header + data row)"
	exit 1
fi
if grep -q "#bytes" "$out/server" && ! has_table "$out/server"; then
	echo "FAIL: server printed a #bytes header but no data row"
	exit 1
fi
if ! links_check "$out" server "$link" || ! links_check "$out" client "$link"; then
	echo "FAIL: the traffic did not go (only) over the $link link"
	exit 1
fi
echo "PASS: $prog $*"
