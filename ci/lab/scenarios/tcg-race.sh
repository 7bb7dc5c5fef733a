# Scenario: the outer QEMU's TCG race (ci/lab/repro/tcg-race.c; docs/lab.md,
# "Lab host crashes"). A 1-vCPU KVM guest looping on CPUID on one lab host
# CPU while the other CPU loops on FXRSTOR/XRSTOR: first the control (guest
# on CPU 1), then the race (guest on CPU 0, whose hflags2 the outer QEMU
# rewrites from CPU 1's thread on every FXRSTOR/XRSTOR). A crash of the lab
# host is the lab's to report (host_crash); the check that was running
# runs again on a fresh lab host, the one that passed is skipped.
secs=$(lab_arg race_seconds 300)
rc=0
for spec in "control 1 0" "race 0 1"; do
	# shellcheck disable=SC2086
	set -- $spec
	lab_skip "tcg-race-$1" && continue
	echo "tcg-race: $1: KVM guest on CPU $2, FXRSTOR/XRSTOR on CPU $3, ${secs}s"
	tcg-race "$2" "$3" "$secs" >/tmp/tcg-race.out 2>&1 &
	pid=$!
	# Its progress lines on the console as they come (the lab's stall
	# bound), every 10 s.
	shown=0
	while kill -0 "$pid" 2>/dev/null; do
		sleep 5
		n=$(wc -l </tmp/tcg-race.out)
		[ "$n" -gt "$shown" ] && sed -n "$((shown + 1)),${n}p" /tmp/tcg-race.out && shown=$n
	done
	wait "$pid"
	status=$?
	sed -n "$((shown + 1)),\$p" /tmp/tcg-race.out
	last=$(grep 'tcg-race: \(done\|failed\)' /tmp/tcg-race.out | tail -n 1)
	ok=false
	[ "$status" -eq 0 ] && ok=true
	lab_check "tcg-race-$1" "$ok" "exit $status; ${last:-no last line}" || rc=1
done
return $rc
