#!/bin/sh
# sysfs_view.sh: liburvt-sysfs.so's /sys/class/infiniband view through
# urvt-run (docs/sysfs.md): shell tools and Python see urvt0, its network
# interface, port state and GID type; URVT_ADDR and URVT_NETDEV change the
# interface and GID; URVT_SYSFS=0 turns it off; other paths are untouched.
set -u
here=$(cd "$(dirname "$0")" && pwd)
run=${URVT_RUN:-$here/../../build/bin/urvt-run}
tmp=$(mktemp -d)
export TMPDIR=$tmp
trap 'rm -rf "$tmp"' EXIT INT TERM
fail=0
check() { # what expected actual
	if [ "$2" = "$3" ]; then echo "ok: $1"; else echo "FAIL: $1: want '$2', got '$3'"; fail=1; fi
}
ib=/sys/class/infiniband

check "ls $ib" urvt0 "$("$run" ls $ib)"
check "device/net" lo "$("$run" ls $ib/urvt0/device/net/)"
check "ndevs/0" lo "$("$run" cat $ib/urvt0/ports/1/gid_attrs/ndevs/0)"
check "types/0" "RoCE v2" "$("$run" cat $ib/urvt0/ports/1/gid_attrs/types/0)"
check "state" "4: ACTIVE" "$("$run" cat $ib/urvt0/ports/1/state)"
check "link_layer" Ethernet "$("$run" cat $ib/urvt0/ports/1/link_layer)"
check "device/net/lo is the interface" "$(cat /sys/class/net/lo/ifindex)" \
	"$("$run" cat $ib/urvt0/device/net/lo/ifindex)"
check "python os.path / listdir" "True ['lo']" "$("$run" /usr/bin/python3 -c \
	"import os; p='$ib/urvt0/device/net/'; print(os.path.exists(p), os.listdir(p))")"
check "URVT_ADDR: gid 0" "0000:0000:0000:0000:0000:ffff:7f29:6363" \
	"$(URVT_ADDR=127.41.99.99 "$run" cat $ib/urvt0/ports/1/gids/0)"
check "URVT_NETDEV" lo "$(URVT_NETDEV=lo "$run" ls $ib/urvt0/device/net/)"
check "URVT_SYSFS=0" no "$(URVT_SYSFS=0 "$run" sh -c "[ -e $ib ] && echo yes || echo no")"
check "other paths untouched" "$(cat /proc/sys/kernel/ostype)" "$("$run" cat /proc/sys/kernel/ostype)"
check "written under TMPDIR, private" "drwx------" \
	"$(ls -ld "$tmp/urvt-sysfs-$(id -u)" | cut -c1-10)"
[ "$fail" = 0 ] && echo "PASS: sysfs view"
exit $fail
