#!/bin/sh
# package.sh BUILD: the Debian package, end to end, on the real system.
#
# Builds urvt_<version>_<arch>.deb ("cmake --build BUILD --target package"),
# installs it with dpkg -i, checks what it put where (urvt-run and urvt-stat
# on PATH, the libraries in their own directory, the system's libibverbs
# untouched, man pages that man finds and renders), runs ibv_rc_pingpong
# server and client through the installed /usr/bin/urvt-run on 127.250.0.x,
# then purges the package and checks nothing of it is left: none of its
# files, no library directory, no /dev/shm/urvt.<pid> of the processes run.
# The package is purged on every exit path.
# Exit 77 (skip) when not root, without dpkg, without ibv_rc_pingpong, or
# when a package named urvt is already installed (it is not ours to remove).
set -u
build=$1
fail=0
bad() { echo "FAIL: $*"; fail=1; }

if [ "$(id -u)" != 0 ]; then echo "SKIP: needs root (dpkg -i)"; exit 77; fi
for t in dpkg dpkg-deb dpkg-query man; do
	command -v "$t" >/dev/null || { echo "SKIP: $t missing"; exit 77; }
done
pp=$(command -v ibv_rc_pingpong) || { echo "SKIP: ibv_rc_pingpong (ibverbs-utils) missing"; exit 77; }
if dpkg-query -W -f='${Status}' urvt 2>/dev/null | grep -q "installed"; then
	echo "SKIP: a urvt package is already installed; not touching it"
	exit 77
fi

tmp=$(mktemp -d)
installed=
cleanup() {
	[ -n "${spid:-}" ] && kill "$spid" 2>/dev/null
	[ -n "$installed" ] && dpkg_retry --purge urvt >/dev/null 2>&1
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# dpkg_retry ARGS: dpkg, waiting (up to 30 s) while another dpkg/apt holds the lock.
dpkg_retry() {
	i=0
	while :; do
		dpkg "$@" >"$tmp/dpkg.out" 2>&1 && { cat "$tmp/dpkg.out"; return 0; }
		if grep -q "lock" "$tmp/dpkg.out" && [ $i -lt 30 ]; then
			i=$((i + 1)); sleep 1; continue
		fi
		cat "$tmp/dpkg.out"
		return 1
	done
}

echo "--- cmake --build $build --target package"
cmake --build "$build" --target package >"$tmp/cpack.log" 2>&1 ||
	{ cat "$tmp/cpack.log"; echo "FAIL: package target"; exit 1; }
deb=$(sed -n 's/.*package: \(.*\.deb\) generated.*/\1/p' "$tmp/cpack.log" | tail -1)
[ -f "$deb" ] || { cat "$tmp/cpack.log"; echo "FAIL: no .deb generated"; exit 1; }
echo "$deb"
case $(basename "$deb") in
urvt_*_"$(dpkg --print-architecture)".deb) ;;
*) bad "package file name $(basename "$deb") is not urvt_<version>_<arch>.deb" ;;
esac
dpkg-deb -f "$deb" Depends

# What the system's libibverbs looked like before (dpkg -V: no output when intact).
sys_ibv=$(dpkg -S "$(readlink -f /usr/lib/*/libibverbs.so.1 2>/dev/null | head -1)" 2>/dev/null | cut -d: -f1)

echo "--- dpkg -i"
dpkg_retry -i "$deb" || { echo "FAIL: dpkg -i"; exit 1; }
installed=1
dpkg-query -L urvt | sort >"$tmp/files"
multi=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
libdir=/usr/lib/$multi/urvt

# Layout.
[ "$(command -v urvt-run)" = /usr/bin/urvt-run ] || bad "urvt-run is not /usr/bin/urvt-run on PATH"
[ "$(command -v urvt-stat)" = /usr/bin/urvt-stat ] || bad "urvt-stat is not /usr/bin/urvt-stat on PATH"
[ -e "$libdir/libibverbs.so.1" ] || bad "no $libdir/libibverbs.so.1"
# Every shared object of the package lives in urvt's own directory.
grep '\.so' "$tmp/files" | grep -v "^$libdir/" | sed 's/^/  outside the urvt directory: /' | grep . &&
	bad "shared objects installed outside $libdir"
if [ -n "$sys_ibv" ] && [ -n "$(dpkg -V "$sys_ibv")" ]; then
	bad "the system's $sys_ibv changed: $(dpkg -V "$sys_ibv")"
fi
/usr/bin/urvt-run --version | grep -q "^urvt-run (urvt) [0-9]" || bad "urvt-run --version"
/usr/bin/urvt-run --help | grep -q "^Usage: urvt-run" || bad "urvt-run --help"
ldp=$(/usr/bin/urvt-run sh -c 'echo "$LD_LIBRARY_PATH"')
[ "${ldp%%:*}" = "$libdir" ] || bad "installed urvt-run puts '$ldp' first, not $libdir"
# The /sys view comes with it (docs/ecosystem.md).
[ "$(/usr/bin/urvt-run cat /sys/class/infiniband/urvt0/ports/1/gid_attrs/types/0)" = "RoCE v2" ] ||
	bad "installed urvt-run shows no /sys view"
if command -v ucx_info >/dev/null; then
	URVT_ADDR=127.250.0.4 URVT_STATS=0 /usr/bin/urvt-run ucx_info -d 2>/dev/null | grep -q "Device: urvt0:1" ||
		bad "ucx_info through the installed urvt-run lists no urvt0:1"
fi

# Man pages: found where they were installed, and they render.
for page in "1 urvt-run" "1 urvt-stat" "7 urvt"; do
	set -- $page
	w=$(man -w "$1" "$2" 2>&1)
	[ "$w" = "/usr/share/man/man$1/$2.$1.gz" ] || bad "man -w $1 $2: $w"
done
MANPAGER=cat PAGER=cat MANWIDTH=80 man urvt-run 2>"$tmp/man.err" | head -12 >"$tmp/man.out"
cat "$tmp/man.out"
grep -q "urvt-run - run an unmodified RDMA verbs program" "$tmp/man.out" || bad "man urvt-run does not render"
[ -s "$tmp/man.err" ] && { cat "$tmp/man.err"; bad "man urvt-run printed warnings"; }

# urvt-run ibv_devinfo and an RC pingpong through the installed wrapper.
dev=$(URVT_ADDR=127.250.0.3 URVT_STATS=0 /usr/bin/urvt-run ibv_devinfo 2>&1)
printf '%s\n' "$dev" | grep -q "hca_id:[[:space:]]*urvt0" || { echo "$dev"; bad "urvt-run ibv_devinfo: no urvt0"; }
port=18950
# sh records its pid, which the program keeps through both execs.
timeout 30 sh -c 'echo $$ >"$1/spid"; exec env URVT_ADDR=127.250.0.1 /usr/bin/urvt-run "$2" -g 0 -p "$3" -n 200' \
	sh "$tmp" "$pp" "$port" >"$tmp/server" 2>&1 &
spid=$!
sleep 0.3
for try in 1 2 3 4 5; do
	timeout 30 sh -c 'echo $$ >"$1/cpid"; exec env URVT_ADDR=127.250.0.2 URVT_STATS_FILE="$1/stats" /usr/bin/urvt-run "$2" -g 0 -p "$3" -n 200 127.250.0.1' \
		sh "$tmp" "$pp" "$port" >"$tmp/client" 2>&1
	crc=$?
	grep -q "Couldn't connect" "$tmp/client" || break
	sleep 0.5
done
wait "$spid"; src=$?; spid=
echo "--- server: exit $src"; cat "$tmp/server"
echo "--- client: exit $crc"; cat "$tmp/client"
[ "$src" = 0 ] && [ "$crc" = 0 ] || bad "pingpong exit codes server=$src client=$crc"
grep -q "bytes in .* seconds" "$tmp/client" || bad "no pingpong result line"
/usr/bin/urvt-stat -q "$tmp/stats" >"$tmp/stat.out" 2>&1
grep -q "^  rx_packets  *[1-9]" "$tmp/stat.out" || { cat "$tmp/stat.out"; bad "installed urvt-stat shows no rx_packets"; }
pids=$(cat "$tmp/spid" "$tmp/cpid")

echo "--- dpkg --purge urvt"
dpkg_retry --purge urvt || bad "dpkg --purge"
installed=
dpkg-query -W urvt >/dev/null 2>&1 && bad "urvt still known to dpkg after purge"
# Nothing of it is left: no file (directories are shared with the system,
# except urvt's own library directory), no counters of its processes.
while read -r f; do
	[ -d "$f" ] && [ ! -L "$f" ] && continue
	[ -e "$f" ] || [ -L "$f" ] && bad "left behind: $f"
done <"$tmp/files"
[ -e "$libdir" ] && bad "left behind: $libdir ($(ls -A "$libdir" | tr '\n' ' '))"
for p in $pids; do
	[ -e "/dev/shm/urvt.$p" ] && bad "left behind: /dev/shm/urvt.$p"
done
man -w urvt-run >/dev/null 2>&1 && bad "man still finds urvt-run after purge"

[ $fail = 0 ] && echo PASS || echo FAIL
exit $fail
