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

# beside LABEL SESSION SCRIPT: time the loops beside SCRIPT's busy loops,
# started in a session of their own (SESSION=own, setsid: a new
# autogroup) or in this one (SESSION=this: this autogroup, but a process
# group of their own through job control); either way they die as one
# group.
beside() {
	local label=$1 session=$2 script=$3
	if [ "$session" = own ]; then
		# not under job control: setsid forks again when it starts as a
		# process group's leader, and $! would not be the session's
		setsid bash -c "$script" &
	else
		set -m
		bash -c "$script" &
		set +m
	fi
	bg=$!
	sleep 1
	timed "$label"
	kill -- -"$bg" 2>/dev/null || true
	wait "$bg" 2>/dev/null || true
	bg=
}

timed "alone"
beside "beside nice 19, this session" this "exec nice -n 19 bash -c '$spin'"
beside "beside nice 19, own session" own "exec nice -n 19 bash -c '$spin'"
beside "beside own session, autogroup 19" own "echo 19 >/proc/self/autogroup; exec nice -n 19 bash -c '$spin'"
