#!/bin/sh
# startup_errors.sh URVT_RUN: every way the device can fail to start says
# so in exactly one line "urvt: ..." on stderr, and the program gets no
# device (Debian's ibv_devinfo through urvt-run: non-zero exit, no hca_id).
# Also urvt-run's own --help, --version, unknown option and missing program.
#
# Runs in a network namespace of its own (unshare -n as root, else
# unshare -rn), so that occupying port 4791 on every loopback address does
# not disturb anyone else on the host. Exit 77 without ibv_devinfo, python3
# or a way to make the namespace.
set -u
run=$1
here=$(cd "$(dirname "$0")" && pwd)
command -v ibv_devinfo >/dev/null || { echo "SKIP: ibv_devinfo (ibverbs-utils) missing"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 missing"; exit 77; }

if [ "${URVT_IN_NETNS:-}" != 1 ]; then
	for u in "unshare -n" "unshare -rn"; do
		# shellcheck disable=SC2086
		if $u true 2>/dev/null; then
			# shellcheck disable=SC2086
			URVT_IN_NETNS=1 exec $u "$0" "$@"
		fi
	done
	echo "SKIP: cannot make a network namespace (unshare -n / -rn)"
	exit 77
fi
ip link set lo up 2>/dev/null || python3 - <<'PY' || { echo "FAIL: cannot bring lo up"; exit 1; }
import fcntl, socket, struct
s = socket.socket()
ifr = struct.pack("16sH", b"lo", 0)
flags = struct.unpack("16sH", fcntl.ioctl(s, 0x8913, ifr))[1]
fcntl.ioctl(s, 0x8914, struct.pack("16sH", b"lo", flags | 1))
PY

tmp=$(mktemp -d)
holder=
trap '[ -n "$holder" ] && kill $holder 2>/dev/null; rm -rf "$tmp"' EXIT
fail=0
n=0

# expect WANT VAR=VALUE...: ibv_devinfo with those variables gets no device
# and stderr has exactly one urvt: line, containing WANT.
expect() {
	want=$1
	shift
	n=$((n + 1))
	env URVT_STATS=0 "$@" "$run" ibv_devinfo >"$tmp/out" 2>"$tmp/err"
	rc=$?
	lines=$(grep -c '^urvt: ' "$tmp/err")
	other=$(grep -c 'urvt' "$tmp/err")
	if [ $rc -eq 0 ] && grep -q 'hca_id:' "$tmp/out"; then
		echo "FAIL [$*]: the device opened (exit $rc)"; fail=1
	elif [ "$lines" != 1 ] || [ "$other" != 1 ]; then
		echo "FAIL [$*]: $lines urvt: lines, $other mentioning urvt, want exactly 1:"
		sed 's/^/    /' "$tmp/err"; fail=1
	elif ! grep '^urvt: ' "$tmp/err" | grep -qF -- "$want"; then
		echo "FAIL [$*]: the line does not say \"$want\":"; sed 's/^/    /' "$tmp/err"; fail=1
	else
		echo "ok   [$*] exit $rc: $(grep '^urvt: ' "$tmp/err")"
	fi
}

# hold ADDR...: bind UDP port 4791 on each (a stand-in for other RoCE
# endpoints) until killed; returns when they are all bound.
hold() {
	[ -n "$holder" ] && { kill $holder; wait $holder 2>/dev/null; }
	# the last holder's "bound" must not be read as this one's
	rm -f "$tmp/hold"
	python3 -c '
import socket, sys, time
s = []
for a in sys.argv[1:]:
    x = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); x.bind((a, 4791)); s.append(x)
print("bound", flush=True)
time.sleep(120)' "$@" >"$tmp/hold" 2>&1 &
	holder=$!
	i=0
	while ! grep -qs bound "$tmp/hold" && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
	grep -q bound "$tmp/hold" || { cat "$tmp/hold"; echo "FAIL: cannot hold port 4791 (after $i tries; holder $holder: $(kill -0 $holder 2>&1 && echo alive))"; exit 1; }
}

# Sanity: with nothing wrong the device opens here.
URVT_STATS=0 "$run" ibv_devinfo >"$tmp/out" 2>"$tmp/err" && grep -q 'hca_id:[[:space:]]*urvt0' "$tmp/out" ||
	{ cat "$tmp/out" "$tmp/err"; echo "FAIL: urvt0 does not open in the namespace"; exit 1; }

# Bad values.
expect "URVT_MTU=999 is not an MTU" URVT_MTU=999
expect "URVT_MTU=1024x is not an MTU" URVT_MTU=1024x
expect "\"drop=2\" needs a probability" URVT_FAULT=drop=2
expect "\"bogus=1\" is not drop, dup" URVT_FAULT=drop=0.1,bogus=1
expect "URVT_FAULT=\"drop=0.1,,\"" URVT_FAULT=drop=0.1,,
expect "\"delay_us=-5\" needs microseconds" URVT_FAULT=delay_us=-5
expect "URVT_PATH=bogus is not a path" URVT_PATH=bogus
expect "URVT_PATH=shm needs the shm link" URVT_PATH=shm URVT_SHM=0
expect "URVT_ADDR=notanaddr is not an IPv4 or IPv6 address" URVT_ADDR=notanaddr
expect "URVT_ADDR=10.9.9.9 is not an address of this host" URVT_ADDR=10.9.9.9
expect "URVT_ADDR=fd00::99 is not an address of this host" URVT_ADDR=fd00::99
expect "URVT_NETDEV=nosuch0: no such network interface" URVT_NETDEV=nosuch0
if ip link add urvtdum0 type dummy 2>/dev/null; then
	expect "URVT_NETDEV=urvtdum0 has no IPv4 or global IPv6 address" URVT_NETDEV=urvtdum0
	ip link del urvtdum0
fi
expect "URVT_PCAP=$tmp/no/such/dir/t.pcap: cannot create" URVT_PCAP="$tmp/no/such/dir/t.pcap"
expect "URVT_STATS_FILE=$tmp/no/such/dir/s: cannot create" URVT_STATS= URVT_STATS_FILE="$tmp/no/such/dir/s"
# a device (a null device of the test's own, never the host's /dev/null) is
# refused and left as it was: it once was unlinked when it could not be mapped
if mknod "$tmp/chr" c 1 3 2>/dev/null; then
	expect "URVT_STATS_FILE=$tmp/chr: not a regular file" URVT_STATS= URVT_STATS_FILE="$tmp/chr"
	[ -c "$tmp/chr" ] || { echo "FAIL: URVT_STATS_FILE=$tmp/chr: the device is gone"; fail=1; }
fi

# Address in use: URVT_ADDR and URVT_NETDEV name a taken address.
hold 127.0.0.1 127.0.0.9
expect "URVT_ADDR=127.0.0.9: UDP port 4791 is in use" URVT_ADDR=127.0.0.9
expect "URVT_NETDEV=lo (127.0.0.1): UDP port 4791 is in use" URVT_NETDEV=lo
# No free address: every one of 127.0.0.1-254 taken.
hold $(seq -f 127.0.0.%g 1 254)
expect "no free address" URVT_ADDR= URVT_NETDEV=

# urvt-run itself.
"$run" --version >"$tmp/out" 2>&1 && grep -q '^urvt-run (urvt) [0-9]' "$tmp/out" || { cat "$tmp/out"; echo "FAIL: --version"; fail=1; }
"$run" --help >"$tmp/out" 2>&1 && grep -q '^Usage: urvt-run' "$tmp/out" || { cat "$tmp/out"; echo "FAIL: --help"; fail=1; }
for v in URVT_ADDR URVT_NETDEV URVT_MTU URVT_FAULT URVT_PCAP URVT_SHM URVT_PATH URVT_DEBUG \
	URVT_STATS URVT_STATS_FILE URVT_SYSFS; do
	grep -q "$v" "$tmp/out" || { echo "FAIL: --help does not mention $v"; fail=1; }
done
"$run" --bogus >"$tmp/out" 2>&1; rc=$?
[ $rc = 2 ] && [ "$(wc -l <"$tmp/out")" = 1 ] && grep -q "^urvt-run: unknown option '--bogus' (try --help)" "$tmp/out" ||
	{ cat "$tmp/out"; echo "FAIL: unknown option: exit $rc"; fail=1; }
"$run" urvt-no-such-program >"$tmp/out" 2>&1; rc=$?
[ $rc = 127 ] && [ "$(wc -l <"$tmp/out")" = 1 ] && grep -q "^urvt-run: urvt-no-such-program: command not found" "$tmp/out" ||
	{ cat "$tmp/out"; echo "FAIL: missing program: exit $rc"; fail=1; }
"$run" >"$tmp/out" 2>&1; rc=$?
[ $rc = 2 ] && [ "$(wc -l <"$tmp/out")" = 1 ] && grep -q "^urvt-run: no program to run" "$tmp/out" ||
	{ cat "$tmp/out"; echo "FAIL: no program: exit $rc"; fail=1; }

[ $fail = 0 ] && echo "PASS ($n start-up failures)" || echo FAIL
exit $fail
