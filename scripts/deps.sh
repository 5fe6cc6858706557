#!/bin/sh
# Installs what urvt needs to build and test on Debian 12 (as root), only if
# something is missing. Sourced by scripts/demo and scripts/test.
URVT_DEB_PACKAGES="build-essential cmake pkg-config git python3 \
  libibverbs-dev ibverbs-utils perftest qperf rdmacm-utils librdmacm-dev python3-pyverbs \
  libcmocka-dev zlib1g-dev libdeflate-dev \
  clang libclang-rt-14-dev llvm valgrind \
  tshark python3-scapy iproute2 nftables procps psmisc \
  man-db dpkg-dev ucx-utils openmpi-bin libopenmpi-dev mpich libmpich-dev libfabric-bin \
  fio tgt libiscsi-bin qemu-system-x86 qemu-utils qemu-block-extra"

urvt_install_deps() {
	missing=""
	for p in $URVT_DEB_PACKAGES; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
			missing="$missing $p"
	done
	[ -z "$missing" ] && return 0
	echo "urvt: installing$missing"
	if [ "$(id -u)" != 0 ]; then
		echo "urvt: missing packages and not root: install them with apt-get" >&2
		return 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null &&
		apt-get install -y -qq --no-install-recommends $missing >/dev/null
}
