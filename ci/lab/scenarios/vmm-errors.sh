# Scenario: our VMM's answers to bad input and to missing or busy VFIO
# devices: exit status 2 and exactly one line naming the problem.

# expect_one_line NAME PATTERN CMD...: CMD must exit 2 printing one line
# (stdout and stderr together) that contains PATTERN. clap's own hint line
# after a flag error ("For more information, try '--help'.") is not counted.
expect_one_line() {
	name=$1 want=$2
	shift 2
	out=$("$@" </dev/null 2>&1)
	rc=$?
	n=$(printf '%s\n' "$out" | grep -v "^For more information, try '--help'.$" | grep -c .)
	ok=false
	[ "$rc" -eq 2 ] && [ "$n" -eq 1 ] && printf '%s\n' "$out" | grep -qF -- "$want" && ok=true
	lab_check "$name" "$ok" "exit $rc, $n line(s): $(printf '%s' "$out" | head -n 3)"
}

dev=/sys/bus/pci/devices/$BDF
status=0

# seccomp (on by default): a thread's denied system call ends the VMM with
# exit 159 and one line naming the thread and the call (the hidden
# --seccomp-selftest hook makes the device thread call getppid, which no
# filter allows); with --seccomp=false the same call runs.
out=$(vmm --kernel /init --seccomp-selftest device </dev/null 2>&1)
rc=$?
ok=false
[ "$rc" -eq 159 ] && printf '%s\n' "$out" | grep -q "seccomp: thread viommu made a denied system call" && ok=true
lab_check seccomp-denied-call "$ok" "exit $rc: $(printf '%s' "$out" | head -n 2)" || status=1
expect_one_line bad-memory "--memory" vmm --kernel /init --memory 12Q || status=1
expect_one_line missing-kernel "--kernel" vmm --kernel /no/such/bzImage || status=1
expect_one_line not-a-pci-device "--vfio /tmp" vmm --kernel /init --vfio /tmp || status=1

# Busy: another process holds the group open (here: this shell).
exec 3<>"/dev/vfio/$GROUP"
expect_one_line busy-device "is busy" vmm --kernel /init --vfio "$dev" --viommu || status=1
exec 3>&-

# Missing: the device is not bound to vfio-pci, so /dev/vfio/N is gone.
echo "$BDF" >/sys/bus/pci/drivers/vfio-pci/unbind
wait_for "[ ! -e /dev/vfio/$GROUP ]" 50
expect_one_line unbound-device "bind $BDF to vfio-pci" vmm --kernel /init --vfio "$dev" || status=1
echo "$BDF" >/sys/bus/pci/drivers_probe
wait_for "[ -c /dev/vfio/$GROUP ]" 50 || status=1
return $status
