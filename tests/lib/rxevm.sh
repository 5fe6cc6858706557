# Shared by the tests that use the rxe-vm harness (tests/rdmacm/rxe_interop.sh,
# tests/apps/tgt_iser_kernel.sh). Source it; RXEVM_RUN must be set.

# rxevm_up NS: VM 1 is up, its qemu alive and its bridge's namespace NS
# there (a VM that died leaves its socket and namespace behind)
rxevm_up() {
	[ -S "$RXEVM_RUN/vm1.agent.sock" ] && [ -f "$RXEVM_RUN/vm1.pid" ] &&
		kill -0 "$(cat "$RXEVM_RUN/vm1.pid")" 2>/dev/null &&
		ip netns list | awk '{print $1}' | grep -qx "$1"
}
