/*
 * Prints every answer of the device-independent helpers (enum names, rate
 * conversions) over their whole input range and beyond. misc_diff.sh runs
 * it once on rdma-core's library and once through urvt-run and diffs the
 * two outputs: urvt's tables must match rdma-core 44 line for line.
 */
#include <stdio.h>

#include <infiniband/verbs.h>

int main(void)
{
	int r;

	for (int i = -3; i <= 40; i++)
		printf("wc_status %d %s\n", i, ibv_wc_status_str((enum ibv_wc_status)i));
	for (int i = -3; i <= 40; i++)
		printf("event %d %s\n", i, ibv_event_type_str((enum ibv_event_type)i));
	for (int i = -3; i <= 16; i++)
		printf("node %d %s\n", i, ibv_node_type_str((enum ibv_node_type)i));
	for (int i = -3; i <= 16; i++)
		printf("port %d %s\n", i, ibv_port_state_str((enum ibv_port_state)i));
	for (int i = -3; i <= 64; i++) {
		r = ibv_rate_to_mbps((enum ibv_rate)i);
		printf("rate %d mult %d mbps %d\n", i, ibv_rate_to_mult((enum ibv_rate)i), r);
		/* Each exact rate maps back, its neighbours do not. */
		for (int d = -1; d <= 1; d++)
			printf("mbps %d -> %d\n", r + d, mbps_to_ibv_rate(r + d));
	}
	for (int m = -3; m <= 1024; m++)
		printf("mult %d -> %d\n", m, mult_to_ibv_rate(m));
	return 0;
}
