#!/bin/sh
# capture.sh SLOT PINGPONG [ARGS...]
#
# Proof that the ICRC survives a NIC-like path (docs/wire.md): capture a
# pingpong run between two network namespaces joined by a veth pair (made
# here, addresses only inside them) whose devices segment UDP GSO sends in
# software (gso_max_segs 1), as a NIC path does; then
#   - pcap_icrc recomputes every packet's ICRC from the captured IP header
#     (IPv4 ID and all) and compares it with the 4 bytes on the wire;
#   - tshark decodes the packets as InfiniBand/RoCEv2.
set -u
slot=$1 prog=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/netns.sh"
bin=${URVT_BUILD:-$here/../../build}
run=$bin/bin/urvt-run
a=urvt-ca$slot b=urvt-cb$slot va=cva$slot vb=cvb$slot
port=$((18500 + slot))
out=$(mktemp -d)
cleanup() {
	[ -n "${dpid:-}" ] && kill "$dpid" 2>/dev/null
	netns_del "$a" "$b"
	rm -rf "$out"
}
trap cleanup EXIT INT TERM
if [ "$(id -u)" != 0 ] || ! command -v dumpcap >/dev/null || ! command -v tshark >/dev/null; then
	echo "SKIP: needs root, dumpcap and tshark"
	exit 77
fi
netns_pair "$a" "$b" "$va" "$vb" "10.$slot.1"
# software segmentation of every GSO send, as on the way to a NIC
ip -n "$a" link set dev "$va" gso_max_segs 1
ip -n "$b" link set dev "$vb" gso_max_segs 1

ip netns exec "$b" dumpcap -P -q -i "$vb" -f "udp port 4791" -w "$out/cap.pcap" \
	>"$out/dumpcap.log" 2>&1 &
dpid=$!
for i in 1 2 3 4 5 6 7 8 9 10; do
	grep -q "File:" "$out/dumpcap.log" 2>/dev/null && break
	sleep 0.2
done
sleep 0.3

timeout 60 ip netns exec "$a" env URVT_NETDEV="$va" "$run" "$prog" -g 0 -p "$port" "$@" \
	>"$out/server" 2>&1 &
spid=$!
sleep 0.3
timeout 60 ip netns exec "$b" env URVT_NETDEV="$vb" "$run" "$prog" -g 0 -p "$port" "$@" \
	"10.$slot.1.1" >"$out/client" 2>&1
crc=$?
wait "$spid"
src=$?
sleep 0.5
kill "$dpid"; wait "$dpid" 2>/dev/null; dpid=
tail -2 "$out/client"
if [ "$src" -ne 0 ] || [ "$crc" -ne 0 ]; then
	echo "FAIL: pingpong exit codes server=$src client=$crc"
	cat "$out/server" "$out/client"
	exit 1
fi
echo "--- ICRC check (pcap_icrc):"
"$bin/tests/wire/pcap_icrc" "$out/cap.pcap" 10 || { echo "FAIL: ICRC"; exit 1; }
echo "--- tshark:"
n=$(tshark -r "$out/cap.pcap" -Y infiniband -T fields -e infiniband.bth.opcode 2>/dev/null | wc -l)
all=$(tshark -r "$out/cap.pcap" -T fields -e frame.number 2>/dev/null | wc -l)
ids=$(tshark -r "$out/cap.pcap" -Y infiniband -T fields -e ip.id 2>/dev/null | sort -u | wc -l)
echo "$n of $all packets decoded as InfiniBand (RoCEv2), $ids distinct IPv4 IDs"
[ "$n" -gt 0 ] && [ "$n" -eq "$all" ] || { echo "FAIL: tshark decode"; exit 1; }
case $prog in *xsrq_pingpong)
	# XRC (docs/wire.md): every packet has an XRC opcode (0xA0-0xBF), and
	# every request's XRCETH (the 4 bytes tshark shows after the BTH)
	# names an SRQ one of the two processes printed
	srqns=$(grep -ho "SRQN [0-9a-f]*" "$out/server" "$out/client" | awk '{print $2}' | sort -u)
	bad=$(tshark -r "$out/cap.pcap" -T fields -e infiniband.bth.opcode -E occurrence=f \
		-e infiniband.vendor 2>/dev/null | awk -v s="$srqns" '
		BEGIN { n = split(s, a, "\n"); for (i = 1; i <= n; i++) ok[a[i]] = 1 }
		$1 < 160 || $1 > 191 { print "not XRC: " $0; next }
		($1 <= 172 || $1 >= 179) && !(substr($2, 1, 2) == "00" && substr($2, 3, 6) in ok) {
			print "XRCETH names no SRQ of theirs: " $0 }' | head -5)
	nreq=$(tshark -r "$out/cap.pcap" -T fields -e infiniband.bth.opcode 2>/dev/null |
		awk '$1 >= 160 && ($1 <= 172 || $1 >= 179)' | wc -l)
	echo "XRC: $nreq requests, SRQs $(echo $srqns)"
	[ -z "$bad" ] && [ "$nreq" -gt 0 ] || { echo "FAIL: XRC decode"; echo "$bad"; exit 1; }
	;;
esac
echo "PASS"
