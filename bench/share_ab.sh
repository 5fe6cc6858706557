#!/bin/sh
# share_ab.sh OLD_RUN NEW_RUN [ROUNDS]
#
# Before/after of the shared host identity (docs/host-identity.md): the
# single-pair figures with two urvt builds, alternating in one sitting so
# that both see the same machine. OLD_RUN / NEW_RUN: the urvt-run of each
# build. Per build and link (shm, udp = URVT_SHM=0): ib_send_lat 8 B
# (typical one-way us) and ib_write_bw 64 KiB (MB/s), ROUNDS times each
# (default 3); prints every run and the median. Each build runs with its
# default address selection: the old one a 127.0.0.x per process, the new
# one the shared 127.0.0.1. (The forwarded path's cost per datagram:
# bench/steer_cost.c.)
set -u
old=$1 new=$2 rounds=${3:-3}
port=19990
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT INT TERM

one() { # RUN LINK PROG ARGS... -> prints the figure
	run=$1 link=$2 prog=$3
	shift 3
	shm=1
	[ "$link" = udp ] && shm=0
	URVT_SHM=$shm timeout 60 "$run" "$prog" -F -d urvt0 -x 0 "$@" -p $port >"$out/s" 2>&1 &
	spid=$!
	sleep 0.4
	URVT_SHM=$shm timeout 60 "$run" "$prog" -F -d urvt0 -x 0 "$@" -p $port 127.0.0.1 >"$out/c" 2>&1
	wait $spid
	port=$((port + 1))
	case $prog in
	ib_send_lat) awk '/^ *[0-9]+ +[0-9]+ /{print $6}' "$out/c" | tail -1 ;;   # t_typical
	ib_write_bw) awk '/^ *[0-9]+ +[0-9]+ /{print $4}' "$out/c" | tail -1 ;;   # BW average MB/s
	esac
}

median() { sort -n | awk '{a[NR]=$1} END {print (NR ? a[int((NR + 1) / 2)] : "-")}'; }

for link in shm udp; do
	for what in lat bw; do
		for b in old new; do : >"$out/$b.$link.$what"; done
		for r in $(seq 1 "$rounds"); do
			for b in old new; do
				eval "run=\$$b"
				if [ $what = lat ]; then
					v=$(one "$run" $link ib_send_lat -s 8 -n 20000)
				else
					v=$(one "$run" $link ib_write_bw -s 65536 -n 5000)
				fi
				echo "$b $link $what round $r: ${v:-failed}"
				[ -n "$v" ] && echo "$v" >>"$out/$b.$link.$what"
			done
		done
		for b in old new; do
			echo "MEDIAN $b $link $what: $(median <"$out/$b.$link.$what")"
		done
	done
done
