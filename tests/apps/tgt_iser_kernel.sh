#!/bin/bash
# tgt_iser_kernel.sh [SLOT]: Linux's kernel iSER initiator (ib_iser on
# rdma_rxe, Debian 12's 6.1 kernel, driven by open-iscsi's iscsid and
# iscsiadm) in a qemu VM of the rxe-vm harness (../shared/rxe-vm, its
# README) against tgtd's iSER target under urvt-run in a namespace on the
# VM's bridge (URVT_NETDEV=eth0: urvt's RoCE identity is that namespace's
# bridge address). docs/ecosystem.md, the tgtd section.
#   VM:   iscsiadm -m node -o new -I iser; --login; the LUN appears as
#         /dev/sdX (tgt's VIRTUAL-DISK); dd writes 1 MiB of random data with
#         O_DIRECT, reads it back with O_DIRECT after dropping the caches;
#         dd reads another MiB that the host put into the backing file
#         before the login; --logout, no session left.
#   host: the backing file holds the VM's MiB (md5), the VM read the
#         host's MiB (md5); tgtd's urvt counters (URVT_STATS_FILE, urvt-stat):
#         at least 2 MiB sent (RDMA WRITEs of the read data) and 1 MiB
#         received (RDMA READ responses of the written data), no retry
#         exhausted, the device on the namespace's address.
#
# The VM image needs ib_iser + sd_mod and open-iscsi's iscsid/iscsiadm
# with their two libraries (libisns0, libopeniscsiusr). The harness's build
# takes both through its own settings (RXEVM_MODULES, RXEVM_EXTRA_BINS):
# nothing in the harness changes. open-iscsi comes from the host when it is
# installed, else from KISER_OPEN_ISCSI=DIR (a `dpkg -x` of the three
# packages), else from `apt-get download` into $KISER_CACHE; without any of
# them the test is skipped (77).
#
# Needs root. Uses the VM if the harness's run directory (the RXEVM_*
# settings below, not cm_rxe_interop's) says one is up and it carries
# iscsiadm; RXEVM_BOOT=1 builds and boots one, attaches the urvt namespace
# and takes everything down again at exit. Otherwise skipped (77). About
# 40 s with the boot (the VM is TCG-emulated).
set -u
slot=${1:-23}
here=$(cd "$(dirname "$0")" && pwd)
rxevm=${RXEVM_DIR:-$here/../../../shared/rxe-vm}
export RXEVM_NS=${RXEVM_NS:-urvtkiser} RXEVM_BR=${RXEVM_BR:-urvtkibr0}
export RXEVM_NET=${RXEVM_NET:-10.79.0}
export RXEVM_RUN=${RXEVM_RUN:-/tmp/urvt-kiser-run}
export RXEVM_BUILD=${RXEVM_BUILD:-/tmp/urvt-kiser-build}
uns=${URVT_KISER_NS:-urvtkiuser}
uaddr=$RXEVM_NET.100
portal=$uaddr:3260
ctl=$((6100 + slot))
iqn=iqn.2026-01.org.urvt:kiser$slot ini=iqn.2026-01.org.urvt:kiser$slot.vm
cache=${KISER_CACHE:-/var/tmp/urvt-open-iscsi}
# run, stat, out (a scratch directory), fail, bad, tgt_setup
. "$here/apps_lib.sh"
booted='' tpid=''

if [ "$(id -u)" != 0 ] || [ ! -x "$rxevm/run-in" ]; then
	echo "SKIP: needs root and the rxe-vm harness at $rxevm"
	rm -rf "$out"; exit 77
fi
for p in tgtd tgtadm; do
	command -v $p >/dev/null || { echo "SKIP: $p not installed"; rm -rf "$out"; exit 77; }
done

vm() { "$rxevm/run-in" "$@"; }

cleanup() {
	if [ -z "$booted" ] && [ -n "${vm_ok:-}" ]; then
		# a VM that stays up: no session or iscsid of ours left in it
		vm -t 60 1 'export LD_LIBRARY_PATH=/usr/bin
			timeout 30 iscsiadm -m node --logoutall=all >/dev/null 2>&1
			killall iscsid 2>/dev/null; true' >/dev/null 2>&1
	fi
	# tgtd leaves on SIGINT
	[ -n "$tpid" ] && kill -INT "$tpid" 2>/dev/null && wait "$tpid" 2>/dev/null
	[ -n "$booted" ] && "$rxevm/down" >/dev/null 2>&1
	[ -n "${APPS_KEEP:-}" ] && cp -r "$out/." "$APPS_KEEP/"
	rm -rf "$out"
}
trap cleanup EXIT INT TERM

. "$here/../lib/rxevm.sh"
vm_up() { rxevm_up "$uns"; }

# open-iscsi's user space for the image: sets iscsi_bins, iscsi_libdir
find_open_iscsi() {
	local r
	for r in "${KISER_OPEN_ISCSI:-}" ""; do
		if [ -x "$r/sbin/iscsid" ] && [ -x "$r/sbin/iscsiadm" ]; then
			iscsi_root=$r; break
		fi
	done
	if [ -z "${iscsi_root+x}" ]; then
		# Debian's packages, unpacked (not installed: no services, no udev)
		if [ ! -x "$cache/root/sbin/iscsid" ]; then
			mkdir -p "$cache/debs" &&
				(cd "$cache/debs" && timeout 120 apt-get download open-iscsi libisns0 libopeniscsiusr) \
					>"$out/apt" 2>&1 &&
				for d in "$cache"/debs/*.deb; do dpkg -x "$d" "$cache/root" || return 1; done
		fi
		[ -x "$cache/root/sbin/iscsid" ] || return 1
		iscsi_root=$cache/root
	fi
	iscsi_libdir=$iscsi_root/usr/lib/x86_64-linux-gnu
	iscsi_bins="$iscsi_root/sbin/iscsid $iscsi_root/sbin/iscsiadm"
	local l p
	# the two libraries go to the image's /usr/bin as well (the harness
	# copies extra files there); the VM runs the tools with
	# LD_LIBRARY_PATH=/usr/bin
	for l in libisns.so.0 libopeniscsiusr.so.0.2.0; do
		p=$(LD_LIBRARY_PATH=$iscsi_libdir ldd "$iscsi_root/sbin/iscsiadm" | awk -v l=$l '$1 == l {print $3}')
		[ -f "$p" ] || return 1
		iscsi_bins="$iscsi_bins $p"
	done
}

if vm_up && [ -n "$(vm -t 20 1 'command -v iscsiadm; test -d /sys/module/ib_iser && echo iser' 2>/dev/null | grep -x iser)" ]; then
	vm_ok=1
elif [ "${RXEVM_BOOT:-0}" != 1 ]; then
	echo "SKIP: no rxe VM with open-iscsi up at $RXEVM_RUN (RXEVM_BOOT=1 boots one)"
	exit 77
else
	find_open_iscsi || { echo "SKIP: no open-iscsi user space (install it, KISER_OPEN_ISCSI=DIR, or apt-get download)"; cat "$out/apt" 2>/dev/null; exit 77; }
	booted=1
	"$rxevm/down" >/dev/null 2>&1
	# the harness's default module list, plus the iSER initiator and disks
	LD_LIBRARY_PATH=$iscsi_libdir RXEVM_EXTRA_BINS="$iscsi_bins" \
		RXEVM_MODULES="virtio_pci virtio_net virtio_console crc32_generic crc32c_generic rdma_rxe ib_uverbs ib_umad rdma_ucm ib_iser sd_mod" \
		"$rxevm/build" >"$out/boot" 2>&1 && "$rxevm/up" 1 >>"$out/boot" 2>&1 &&
		"$rxevm/attach" "$uns" "$uaddr" >>"$out/boot" 2>&1 || {
		cat "$out/boot"; echo "FAIL: could not boot the rxe VM"; exit 1; }
	vm_ok=1
fi

# the target: tgtd under urvt on the namespace's eth0 (its iSER listener
# takes 0.0.0.0:3260 of that identity; the TCP portal is the namespace's)
lun=$out/lun.img
truncate -s 16M "$lun"
# the MiB at 1 MiB the VM reads without having written it
head -c 1048576 /dev/urandom >"$out/hostmib"
dd if="$out/hostmib" of="$lun" bs=1048576 seek=1 conv=notrunc status=none
hostmd5=$(md5sum <"$out/hostmib" | cut -c 1-32)
ip netns exec "$uns" env URVT_NETDEV=eth0 URVT_STATS_FILE="$out/stats.tgtd" \
	timeout -k 5 300 "$run" tgtd -f -d 1 -C $ctl --iscsi portal=$portal >"$out/tgtd.log" 2>&1 &
tpid=$!
adm() { timeout 10 ip netns exec "$uns" tgtadm -C $ctl --lld iser "$@"; }
if ! tgt_setup "$iqn" "$lun" "$ini"; then
	tail -5 "$out/tgtd.log"
	echo "FAIL: tgtadm could not set up the iSER target"
	exit 1
fi

# the initiator: iscsid in the VM, a node record on the iser interface,
# login, the disk, dd both ways, logout. The VM's script prints KEY=VALUE
# lines for the host to check.
vm -t 240 1 - >"$out/vm" 2>&1 <<EOF
export LD_LIBRARY_PATH=/usr/bin
T=$iqn P=$portal
killall iscsid 2>/dev/null; sleep 0.3
rm -rf /etc/iscsi /var/lib/iscsi
mkdir -p /etc/iscsi /var/lib/iscsi /run/lock/iscsi
echo InitiatorName=$ini >/etc/iscsi/initiatorname.iscsi
: >/etc/iscsi/iscsid.conf
# in a session of its own: iscsid, when it stops, signals its whole
# process group, which would otherwise be the harness's agent shell
setsid iscsid -f >/tmp/iscsid.log 2>&1 </dev/null &
# iscsid listens on an abstract unix socket (up to 10 s)
i=0; while [ \$i -lt 50 ] && ! grep -q ISCSIADM_ABSTRACT /proc/net/unix; do sleep 0.2; i=\$((i+1)); done
iscsiadm -m node -o new -T \$T -p \$P -I iser || { echo NODE=fail; exit 1; }
echo "TRANSPORT=\$(iscsiadm -m node -T \$T -p \$P | awk '\$1 == "iface.transport_name" {print \$3}')"
timeout 120 iscsiadm -m node -T \$T -p \$P -I iser --login; echo LOGIN=\$?
iscsiadm -m session
# the LUN: the sd disk whose model is tgt's VIRTUAL-DISK (up to 30 s)
d=; i=0
while [ -z "\$d" ] && [ \$i -lt 150 ]; do
	for s in /sys/block/sd*; do
		[ -e "\$s/device/model" ] && grep -q VIRTUAL-DISK "\$s/device/model" && [ -b /dev/\${s##*/} ] && d=/dev/\${s##*/}
	done
	[ -n "\$d" ] || sleep 0.2; i=\$((i+1))
done
echo DISK=\$d
echo "SIZE=\$(blockdev --getsize64 \$d)"
dd if=/dev/urandom of=/tmp/pat bs=65536 count=16 2>/dev/null
echo "VMMD5=\$(md5sum </tmp/pat | cut -c 1-32)"
# 1 MiB in 256 KiB writes, O_DIRECT: each one a SCSI WRITE to the target
dd if=/tmp/pat of=\$d bs=262144 count=4 oflag=direct conv=fsync 2>/dev/null; echo WRITE=\$?
echo 3 >/proc/sys/vm/drop_caches; blockdev --flushbufs \$d
dd if=\$d of=/tmp/back bs=262144 count=4 iflag=direct 2>/dev/null; echo READ=\$?
cmp -s /tmp/pat /tmp/back; echo SAME=\$?
dd if=\$d of=/tmp/hostmib bs=65536 skip=16 count=16 iflag=direct 2>/dev/null; echo READ2=\$?
echo "HOSTMD5=\$(md5sum </tmp/hostmib | cut -c 1-32)"
timeout 60 iscsiadm -m node -T \$T -p \$P --logout; echo LOGOUT=\$?
iscsiadm -m session >/dev/null 2>&1; echo SESSIONS_LEFT=\$?
ls /sys/block | grep -c '^sd' | sed 's/^/DISKS_LEFT=/'
for c in rcvd_pkts sent_pkts rcvd_seq_err retry_exceeded_err duplicate_request out_of_seq_request; do
	echo "rxe0 \$c \$(cat /sys/class/infiniband/rxe0/ports/1/hw_counters/\$c 2>/dev/null)"
done
killall iscsid 2>/dev/null; true
EOF
vrc=$?
cat "$out/vm"
val() { tr -d '\r' <"$out/vm" | awk -F= -v k="$1" '$1 == k {v = substr($0, length(k) + 2)} END {print v}'; }
[ "$vrc" = 0 ] || bad "the VM's script ended with $vrc"
[ "$(val TRANSPORT)" = iser ] || bad "the node record's transport is not iser: $(val TRANSPORT)"
[ "$(val LOGIN)" = 0 ] || bad "iscsiadm --login over iSER failed"
case $(val DISK) in /dev/sd*) ;; *) bad "no /dev/sdX with tgt's VIRTUAL-DISK in the VM" ;; esac
[ "$(val SIZE)" = 16777216 ] || bad "the disk is not the LUN's 16 MiB: $(val SIZE)"
[ "$(val WRITE)" = 0 ] || bad "dd could not write the disk"
[ "$(val READ)" = 0 ] && [ "$(val READ2)" = 0 ] || bad "dd could not read the disk"
[ "$(val SAME)" = 0 ] || bad "the VM read back other data than it wrote"
filemd5=$(head -c 1048576 "$lun" | md5sum | cut -c 1-32)
[ -n "$(val VMMD5)" ] && [ "$filemd5" = "$(val VMMD5)" ] ||
	bad "the backing file does not hold the VM's MiB ($filemd5, VM $(val VMMD5))"
[ "$(val HOSTMD5)" = "$hostmd5" ] || bad "the VM read other data than the host's MiB ($(val HOSTMD5), host $hostmd5)"
[ "$(val LOGOUT)" = 0 ] || bad "iscsiadm --logout failed"
[ "$(val SESSIONS_LEFT)" = 21 ] || bad "an iSCSI session is left after the logout"
[ "$(val DISKS_LEFT)" = 0 ] || bad "a disk is left after the logout"

# tgtd's side, after it left (SIGINT)
kill -INT "$tpid" 2>/dev/null
i=0
while kill -0 "$tpid" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
wait "$tpid" 2>/dev/null
tpid=
echo "--- tgtd"
grep -E "login|established|closing|non-login|rror" "$out/tgtd.log" | grep -v Flushed | tail -8
if [ -s "$out/stats.tgtd" ]; then
	"$stat" -a "$out/stats.tgtd" | head -1
	for k in tx_packets tx_bytes rx_packets rx_bytes tx_errors retransmits retry_exceeded sequence_errors; do
		eval "s_$k=\$(counter \"\$out/stats.tgtd\" $k)"
		eval "echo \"urvt tgtd: $k \${s_$k:-?}\""
	done
	# the host's MiB and the VM's MiB read back went out as RDMA WRITEs
	[ "${s_tx_bytes:-0}" -ge 2097152 ] || bad "tgtd sent ${s_tx_bytes:-0} bytes over urvt, expected >= 2 MiB"
	# the VM's MiB came in as RDMA READ responses
	[ "${s_rx_bytes:-0}" -ge 1048576 ] || bad "tgtd received ${s_rx_bytes:-0} bytes over urvt, expected >= 1 MiB"
	[ "${s_retry_exceeded:-1}" = 0 ] || bad "tgtd's urvt exhausted a retry count"
	[ "${s_tx_errors:-1}" = 0 ] || bad "tgtd's urvt had send errors"
	"$stat" -a "$out/stats.tgtd" | head -1 | grep -q " $uaddr " ||
		bad "tgtd's device is not on $uaddr"
else
	bad "tgtd wrote no urvt counters: did it run over urvt?"
fi
[ $fail = 0 ] && echo "PASS: kernel iSER initiator (ib_iser on rxe, VM) -> tgtd on urvt at $portal: login, /dev/sdX, 1 MiB written and read back, 1 MiB of the host's read, logout"
exit $fail
