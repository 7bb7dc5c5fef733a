# Scenario: our VMM on every way out of a guest that has the NVMe behind the
# virtio-iommu with DMA mappings in place: power-off (exit 0), reset (3,
# with --on-reboot exit), the reboot in place (our VMM's default,
# --on-reboot restart, bounded by --reboot-limit),
# triple fault (4) and SIGTERM in the middle of fio (143). Each must exit
# with its code and print no VFIO error (e.g. VFIO_GROUP_UNSET_CONTAINER
# EBUSY, "Could not unbind VFIO group"), and the next guest must find the
# NVMe working (write+verify), so nothing was left behind. A guest that
# reboots (reset, the restart in place, triple fault) must leave no DMA
# fault at the lab host's IOMMU: the patched guest shuts the NVMe down
# before the virtio-iommu (without that every reboot waited out the NVMe's
# 60 s admin timeout, docs/distro-kernels.md).
# Then the crash test: SIGKILL in the middle of a 128k randread (the VMM
# gets no chance to clean up: the kernel closes its VFIO and KVM files),
# for our VMM and for stock QEMU, each followed by a guest that must
# write and verify through the same NVMe. Last, a guest under our VMM
# running as nobody (--user).

# One vCPU per guest: the lab host crashes that took this scenario down in
# CI (a page-fault recursion on the guest's GS base, ci/lab/lab at
# HOST_BOOTS_PER_ROUND) and the stray triple faults of a second vCPU at
# the reset vector during a guest's reboot come from the nested emulation
# kicking a running vCPU on the other CPU: 24 of 150 lab hosts that ran
# 2-vCPU guests crashed so, none of 172 with 1-vCPU guests. What this
# scenario checks is the VMM's way out, which one vCPU exercises (the
# vCPUs are stopped before the devices are released either way);
# smp-smoke and the guest scenarios run 2-vCPU guests.
EXITS_CPUS=1
# The patched guest this lab host was given (the scenario's guest_kernels:
# patched 6.12).
GUEST_KERNEL=/lab/guest/$(lab_arg kernel_patched patched).bzImage

# start_guest VMM LOG CMDLINE_EXTRA [VMM_FLAGS [ON_REBOOT]]: boot the
# patched guest with the NVMe behind a virtio-iommu, under our VMM (vmm,
# with VMM_FLAGS) or stock QEMU (qemu), in the background; $pid is the
# VMM's. Our VMM runs with ON_REBOOT, by default --on-reboot exit: a guest
# reboot (the reset check's, or a guest that panics or resets itself)
# then ends it with 3, as -no-reboot ends stock QEMU, instead of
# restarting the guest in place. An empty ON_REBOOT (the restart check)
# leaves our VMM's default, the restart.
start_guest() {
	cmdline="console=ttyS0 quiet panic=-1 lab.mode=smoke lab.bs=4k lab.verify=4M $3"
	on_reboot=${5---on-reboot exit}
	if [ "$1" = qemu ]; then
		qemu-system-x86_64 -accel kvm -M q35 -cpu host -smp $EXITS_CPUS -m 1024 -nodefaults \
			-display none -monitor none -serial stdio -no-reboot -net none \
			-kernel "$GUEST_KERNEL" -initrd /lab/guest/initramfs.cpio \
			-device virtio-iommu-pci -device "vfio-pci,host=$BDF" -append "$cmdline" \
			</dev/null >"$2" 2>&1 &
	else
		vmm --kernel "$GUEST_KERNEL" --initrd /lab/guest/initramfs.cpio \
			--memory 1024M --cpus $EXITS_CPUS --vfio "/sys/bus/pci/devices/$BDF" --viommu \
			--cmdline "$cmdline" $on_reboot ${4:-} </dev/null >"$2" 2>&1 &
	fi
	pid=$!
}

# host_dma_faults: how many DMA faults the lab host's IOMMU has logged
# (Intel's DMAR or AMD-Vi; a fault record is rate-limited, so this counts
# at least one per burst).
host_dma_faults() {
	dmesg | grep -c 'DMAR: \[DMA \(Read\|Write\)\|AMD-Vi.*IO_PAGE_FAULT'
}

# reboot_faults BEFORE: the complaint, if any, about the host DMA faults
# logged since BEFORE (host_dma_faults) by a guest that rebooted. The
# patched guest shuts its endpoints down before the virtio-iommu
# (guest-patches, "Shut endpoints down before the IOMMU"); a guest that
# resets the virtio-iommu first leaves the NVMe DMAing to IOVAs that are
# no longer mapped, and waits out the NVMe's 60 s admin timeout.
reboot_faults() {
	n=$(($(host_dma_faults) - $1))
	[ "$n" -gt 0 ] && echo "the host IOMMU logged $n DMA fault(s) of the NVMe while the guest rebooted (virtio-iommu reset before the NVMe shut down)"
	return 0
}

# guest_error LOG: the first error the guest reported in LOG, quote-free.
guest_error() {
	grep -m1 -o '"event":"error","message":"[^"]*' "$1" | cut -c1-200 | tr '"\\' "''"
}

# exits_check NAME WANT_RC CMDLINE_EXTRA [MARKER [SIGNAL [VMM [VMM_FLAGS]]]]:
# boot the patched guest under VMM (default: ours, with VMM_FLAGS); with
# MARKER, send SIGNAL (default TERM) to the VMM once the guest printed it.
exits_check() {
	name=$1 want=$2 extra=$3 marker=${4:-} sig=${5:-TERM}
	log=/tmp/exit-$name.log
	faults=$(host_dma_faults)
	start_guest "${6:-vmm}" "$log" "$extra" "${7:-}"
	# Until the VMM exits (at most ~600 s), sending SIGNAL once MARKER is
	# out. The guest prints a progress line every 5 s (lab.heartbeat): a
	# log that has not grown for ~120 s is a hung guest (the lab's nested
	# emulation hangs one now and then, docs/lab.md); it is
	# killed and started over (at most twice) below, well before the lab takes the
	# silent lab host for wedged (420 s).
	i=0 quiet=0 size=-1 sent= hung=
	while kill -0 "$pid" 2>/dev/null && [ $i -lt 6000 ]; do
		if [ -n "$marker" ] && [ -z "$sent" ] && grep -q "$marker" "$log"; then
			kill -"$sig" "$pid"
			sent=1
		fi
		now=$(stat -c %s "$log")
		if [ "$now" = "$size" ]; then quiet=$((quiet + 1)); else size=$now quiet=0; fi
		if [ $quiet -ge 1200 ]; then
			hung="the guest hung (no output for 120 s)"
			break
		fi
		sleep 0.1
		i=$((i + 1))
	done
	kill -KILL "$pid" 2>/dev/null
	wait "$pid"
	rc=$?
	crash=$(guest_crash "$log")
	why=${crash:+guest kernel crashed: $crash}
	# A triple fault nobody asked for (exit 4 where another code is
	# wanted) leaves no panic text: the lab's nested emulation corrupts a
	# vCPU's state now and then (docs/lab.md).
	[ -z "$crash" ] && [ "$rc" = 4 ] && [ "$want" != 4 ] && why="guest kernel crashed: unexpected triple fault (exit 4)"
	# Stock QEMU runs with -no-reboot: a guest that resets itself (the
	# same emulation fault, often before its console says anything) makes
	# it exit 0, which no QEMU check but a finished guest wants.
	[ -z "$crash" ] && [ "${6:-vmm}" = qemu ] && [ "$rc" = 0 ] && [ "$want" != 0 ] &&
		! grep -q '^@@LAB-GUEST-DONE@@' "$log" &&
		why="guest kernel crashed: stock QEMU exited 0 (-no-reboot: the guest reset itself) before the guest finished"
	# A hung guest was killed by us, whatever exit code that gave.
	[ -n "$hung" ] && why=$hung
	# Up to two more attempts: a lab host that meets the fault once tends
	# to meet it again (seen: stock QEMU's guest reset itself in two
	# attempts in a row in one lab host, which then failed the check).
	if { [ "$rc" != "$want" ] || [ -n "$hung" ]; } && [ -n "$why" ] && [ "${retried:-0}" -lt 2 ]; then
		# The nested emulation crashes or hangs a guest kernel now and
		# then (as in guest-runs): start over, reported as a warning.
		echo "@@LAB-RETRY@@ {\"tag\":\"$name\",\"reason\":\"$why\"}"
		retried=$((${retried:-0} + 1))
		exits_check "$@"
		r=$?
		retried=0
		return $r
	fi
	# The VMM's own complaints (not the guest's: its boot record names
	# busybox, its kernel log says vfio).
	errs=$(grep -v '^\[\|^@@LAB-' "$log" | grep -i 'vfio\|could not\|EBUSY\|resource busy' | head -n 3 | tr '\n' ' ')
	errs=${errs:+VMM said: $errs}
	# A guest that powers off on its own must have written and verified
	# its data through the NVMe (fio's verify) and said so: rc=0.
	if [ "$want" = 0 ] && ! grep -q '^@@LAB-GUEST-DONE@@ rc=0' "$log"; then
		errs="${errs:+$errs; }the guest did not finish write+verify: $(guest_error "$log")"
	fi
	# A kill check's guest writes and verifies at every size before its
	# randread (lab.mode=fio): one that never got there says why.
	if [ -n "$marker" ] && [ -z "$sent" ]; then
		errs="${errs:+$errs; }the guest never reached '$marker': $(guest_error "$log")"
	fi
	[ -n "$hung" ] && errs="${errs:+$errs; }$hung"
	# A guest that reboots (reset, triple-fault) shuts the NVMe down
	# first; a killed VMM's device may fault as it goes.
	case $extra in
	*lab.end=reboot*)
		f=$(reboot_faults "$faults")
		[ -n "$f" ] && errs="${errs:+$errs; }$f"
		;;
	esac
	ok=false
	[ "$rc" = "$want" ] && [ -z "$errs" ] && ok=true
	lab_check "$name" "$ok" "exit $rc (want $want)${errs:+; $errs}" && return 0
	echo "---- $name: guest and VMM output ----"
	tail -n 40 "$log"
	return 1
}

# restart_check: the reboot in place. The guest reboots at the end of
# each run (lab.end=reboot, through the i8042: reboot=k) and our VMM, with
# no --on-reboot (its default is restart) and --reboot-limit 3/600,
# restarts it in place three times: four boots, each writing and verifying through the NVMe (the
# VFIO device reset and its DMA remapped from zero each time), and the
# fourth reboot ends the VMM with exit 1 naming --reboot-limit.
# vmm_reboots_total (GET /metrics, through vmmctl) must reach 3.
restart_check() {
	log=/tmp/exit-restart.log sock=/tmp/vmm-restart.sock
	rm -f "$sock"
	faults=$(host_dma_faults)
	# The VMM logs each restart ("restarting the guest in place") at info;
	# only its machine module's (its other info lines name VFIO, which
	# the check below takes for the VMM's complaints).
	export RUST_LOG=warn,vmm::machine=info
	start_guest vmm "$log" "lab.end=reboot reboot=k" \
		"--reboot-limit 3/600 --api-socket $sock" ""
	unset RUST_LOG
	# Four boots take longer than the lab's console silence bound
	# (HOST_STALL): a progress line on the console for each boot seen.
	i=0 counted=0 seen=0
	while kill -0 "$pid" 2>/dev/null && [ $i -lt 4500 ]; do
		if [ $((i % 10)) = 0 ] && [ -S "$sock" ]; then
			n=$(vmmctl "$sock" metrics 2>/dev/null | awk '$1 == "vmm_reboots_total" {print $2}')
			[ -n "$n" ] && counted=$n
		fi
		if [ $((i % 10)) = 0 ]; then
			b=$(grep -c '"event":"boot"' "$log")
			if [ "$b" != "$seen" ]; then
				seen=$b
				echo "@@LAB-PROGRESS@@ restart: boot $b, vmm_reboots_total $counted"
			fi
		fi
		sleep 0.2
		i=$((i + 1))
	done
	kill -KILL "$pid" 2>/dev/null
	wait "$pid"
	rc=$?
	boots=$(grep -c '"event":"boot"' "$log")
	verified=$(grep -c '^@@LAB-GUEST-DONE@@ rc=0' "$log")
	restarts=$(grep -c 'restarting the guest in place' "$log")
	errs=$(grep -v '^\[\|^@@LAB-' "$log" | grep -i 'vfio\|could not\|EBUSY\|resource busy' | head -n 3 | tr '\n' ' ')
	errs=${errs:+VMM said: $errs}
	limit=$(grep -c 'more than 3 times in 600 s' "$log")
	f=$(reboot_faults "$faults")
	[ -n "$f" ] && errs="${errs:+$errs; }$f"
	ok=false
	[ "$rc" = 1 ] && [ "$boots" = 4 ] && [ "$verified" = 4 ] && [ "$counted" = 3 ] &&
		[ "$limit" -ge 1 ] && [ -z "$errs" ] && ok=true
	lab_check restart "$ok" "exit $rc (want 1, the reboot limit: $limit), boots $boots (want 4), verified $verified (want 4), vmm_reboots_total $counted (want 3), restarts logged $restarts${errs:+; $errs}" && return 0
	echo "---- restart: guest and VMM output ----"
	grep -v '^@@LAB-GUEST@@ {"event":"progress' "$log" | tail -n 80
	return 1
}

# After a lab host crash the runner names the checks that passed
# (lab_skip): each runs once.
#
# Nothing left behind by an exit: every guest after the first finds the
# NVMe as the one before left it and writes and verifies through it before
# anything else (power-off and user-nobody: their whole run; the kill
# checks: lab.mode=fio verifies at every block size before the randread
# they are killed in, and a guest that never gets there fails its check
# with its error). So the SIGKILL of our VMM is followed by stock QEMU's
# guest, QEMU's SIGKILL by ours as nobody.
status=0
lab_skip power-off || exits_check power-off 0 "" || status=1
lab_skip reset || exits_check reset 3 "lab.end=reboot reboot=k" || status=1
lab_skip restart || restart_check || status=1
lab_skip triple-fault || exits_check triple-fault 4 "lab.end=reboot reboot=t" || status=1
lab_skip sigterm || exits_check sigterm 143 "lab.mode=fio lab.runtime=60" "@@LAB-PHASE@@ begin randread" || status=1
# The crash test: killed mid-I/O, nothing cleaned up by the VMM itself.
kill_mid_io="lab.mode=fio lab.bs=128k lab.runtime=60"
lab_skip sigkill || exits_check sigkill 137 "$kill_mid_io" "@@LAB-PHASE@@ begin randread" KILL || status=1
lab_skip qemu-sigkill || exits_check qemu-sigkill 137 "$kill_mid_io" "@@LAB-PHASE@@ begin randread" KILL qemu || status=1
# Unprivileged: root given up after the setup (--user), a full
# write+verify, a clean power-off.
lab_skip user-nobody || exits_check user-nobody 0 "" "" TERM vmm "--user 65534:65534" || status=1
return $status
