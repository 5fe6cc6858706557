# Sourced by the tests that put server and client in two network namespaces
# joined by a veth pair, the stand-in for two hosts.
#
#   netns_pair A B VA VB NET   namespaces A and B, made afresh; veth end VA in A
#                              with NET.1/24, VB in B with NET.2/24; lo and both
#                              ends up. Exits the test: 77 (skip) unless root
#                              with iproute2, 1 if it cannot be built.
#   netns_del A B              removes both (at exit)

netns_del() {
	ip netns del "$1" 2>/dev/null
	ip netns del "$2" 2>/dev/null
}

netns_pair() {
	if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null; then
		echo "SKIP: netns needs root and iproute2"
		exit 77
	fi
	netns_del "$1" "$2"
	ip netns add "$1" && ip netns add "$2" || exit 1
	ip link add "$3" netns "$1" type veth peer name "$4" netns "$2" || exit 1
	ip -n "$1" addr add "$5.1/24" dev "$3"
	ip -n "$2" addr add "$5.2/24" dev "$4"
	for ns in "$1" "$2"; do ip -n "$ns" link set lo up; done
	ip -n "$1" link set "$3" up
	ip -n "$2" link set "$4" up
}
