#!/usr/bin/env bash
# How much CPU a background job at the lowest priority takes from the
# foreground on this machine (why ci/test.sh sets its kernel builds'
# autogroup to nice 19):
#
#   ci/cpu-share-check.sh [LOOPS]
#
# Times two nice-0 busy loops (LOOPS iterations each, default 300000)
# alone, then beside one busy loop per CPU started the way a background
# build could be: nice 19 in this session, nice 19 in a session of its own
# (setsid: a new autogroup when kernel.sched_autogroup_enabled=1), and in
# a session of its own whose autogroup is at nice 19. Prints one line each;
# a time well over "alone" means the background took the foreground's CPU.
set -euo pipefail
loops=${1:-300000}
[[ $loops =~ ^[1-9][0-9]*$ ]] || {
	echo "cpu-share-check: LOOPS must be a positive integer, got '$loops'" >&2
	exit 2
}
echo "kernel.sched_autogroup_enabled=$(cat /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null || echo absent), $(nproc) CPUs"
spin='for _ in $(seq "$(nproc)"); do (while :; do :; done) & done; wait'
bg=
trap '[ -z "$bg" ] || kill -- -"$bg" 2>/dev/null' EXIT

timed() {
	local t0=$EPOCHREALTIME pids=()
	for _ in 1 2; do
		(
			n=0
			while [ $n -lt "$loops" ]; do n=$((n + 1)); done
		) &
		pids+=($!)
	done
	wait "${pids[@]}"
	printf '%-36s %6.2f s\n' "$1" "$(echo "$EPOCHREALTIME - $t0" | bc)"
}

beside() {
	local label=$1
	shift
	setsid bash -c "$1" &
	bg=$!
	sleep 1
	timed "$label"
	kill -- -"$bg" 2>/dev/null || true
	wait "$bg" 2>/dev/null || true
	bg=
}

timed "alone"
# The first background stays in this session (this autogroup) but gets a
# process group of its own (job control), so that it and its loops die
# as one group like the setsid ones below.
set -m
nice -n 19 bash -c "$spin" &
set +m
bg=$!
sleep 1
timed "beside nice 19, this session"
kill -- -"$bg" 2>/dev/null || true
wait "$bg" 2>/dev/null || true
bg=
beside "beside nice 19, own session" "exec nice -n 19 bash -c '$spin'"
beside "beside own session, autogroup 19" "echo 19 >/proc/self/autogroup; exec nice -n 19 bash -c '$spin'"
