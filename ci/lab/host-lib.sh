# Helpers for lab scenarios, sourced by the lab host's /init (busybox sh).

# wait_for CONDITION TENTHS: poll a shell condition every 0.1 s.
wait_for() {
	i=0
	while ! eval "$1"; do
		[ "$i" -ge "$2" ] && return 1
		sleep 0.1
		i=$((i + 1))
	done
}

# lab_arg NAME DEFAULT: value of lab.NAME= on the lab host's command line.
lab_arg() {
	v=$2
	for a in $(cat /proc/cmdline); do
		case "$a" in "lab.$1="*) v=${a#*=} ;; esac
	done
	echo "$v"
}

# guest_cmdline EXTRA: the L3 kernel command line; lab.* knobs for the
# guest pass through from the lab host's own command line.
guest_cmdline() {
	c="console=ttyS0 quiet panic=-1 lab.mode=$(lab_arg mode smoke)"
	for k in bs runtime iodepth verify counters numjobs; do
		v=$(lab_arg "$k" "")
		[ -n "$v" ] && c="$c lab.$k=$v"
	done
	echo "$c $1"
}

# vmm_command VMM IOMMU KERNEL TRACE [FLAGS]: the command that starts the guest
# under VMM (qemu: stock QEMU; vmm: ours) with IOMMU (viommu: the NVMe behind
# a virtio-iommu; none: plain passthrough; nodev: no device at all), QEMU
# recording device requests to TRACE, and FLAGS (more of the VMM's flags)
# added. It ends with the VMM's flag for the kernel command line, which the
# caller appends.
vmm_command() {
	local vmm=$1 iommu=$2 kernel=$3 trace=$4 flags=$5
	case "$vmm" in
	qemu)
		echo qemu-system-x86_64 -accel kvm -M q35 -cpu host -smp "$(lab_arg guest_cpus 1)" -m 1024 \
			-nodefaults -display none -monitor none -serial stdio -no-reboot -net none \
			-kernel "/lab/guest/$kernel.bzImage" -initrd /lab/guest/initramfs.cpio
		if [ "$iommu" = viommu ]; then
			echo -device virtio-iommu-pci -D "$trace" \
				-trace virtio_iommu_map -trace virtio_iommu_unmap -trace vfio_iommu_map_notify
		fi
		[ "$iommu" != nodev ] && echo -device "vfio-pci,host=$BDF"
		[ -n "$flags" ] && echo "$flags"
		echo -append
		;;
	vmm)
		# Ours (vmm/): the NVMe behind our virtio-iommu, or plain passthrough.
		echo vmm --kernel "/lab/guest/$kernel.bzImage" --initrd /lab/guest/initramfs.cpio \
			--memory 1024M --cpus "$(lab_arg guest_cpus 1)" --api-socket "$trace.sock"
		[ "$iommu" != nodev ] && echo --vfio "/sys/bus/pci/devices/$BDF"
		[ "$iommu" = viommu ] && echo --viommu
		[ -n "$flags" ] && echo "$flags"
		echo --cmdline
		;;
	*) return 1 ;;
	esac
}

# run_guest TAG VMM IOMMU KERNEL [EXTRA_CMDLINE [VMM_FLAGS]]: boot the guest,
# relay its results tagged with TAG, count device requests per fio phase.
# Returns 0 when the guest finished its scenario without an error.
run_guest() {
	local tag=$1 vmm=$2 iommu=$3 kernel=$4 extra=$5 flags=$6
	local trace=/tmp/trace-$tag.log log=/tmp/guest-$tag.log
	[ -f "/lab/guest/$kernel.bzImage" ] || { echo "no guest kernel '$kernel' in the lab image"; return 1; }
	cmd=$(vmm_command "$vmm" "$iommu" "$kernel" "$trace" "$flags") || { echo "unknown vmm '$vmm'"; return 1; }
	limit=$(lab_arg guest_timeout 600)
	echo "@@LAB-RUN@@ {\"tag\":\"$tag\",\"vmm\":\"$vmm\",\"iommu\":\"$iommu\",\"kernel\":\"$kernel\",\"extra\":\"$extra\"}"
	start=$(date +%s)
	# shellcheck disable=SC2086
	(timeout "$limit" $cmd "$(guest_cmdline "$extra")" </dev/null 2>&1
		echo "@@LAB-VMM-EXIT@@ rc=$?") |
		awk -v tag="$tag" -v trace="$trace" -v logf="$log" -v vmm="$vmm" '
		function lines(   n, cmd) {
			n = 0; cmd = "cat " trace " 2>/dev/null | wc -l"; cmd | getline n; close(cmd)
			return n + 0
		}
		# What the device has done so far. Stock QEMU: lines of its trace
		# (counted by range at the end); ours: "MAP UNMAP VFIO-calls FLUSH
		# deferred-UNMAPs flush-VFIO-calls merged-ranges" from its metrics
		# (Prometheus text: "name{labels} value" a line, # comments).
		function snap(   cmd, l, f, v) {
			if (vmm != "vmm") return lines()
			split("", v); cmd = "vmmctl " trace ".sock metrics 2>/dev/null"
			while ((cmd | getline l) > 0)
				if (l !~ /^#/ && split(l, f, " ") == 2) v[f[1]] = f[2] + 0
			close(cmd)
			return (v["viommu_requests_total{type=\"map\"}"] + 0) " " (v["viommu_requests_total{type=\"unmap\"}"] + 0) \
				" " (v["viommu_backend_map_calls_total"] + v["viommu_backend_unmap_calls_total"]) \
				" " (v["viommu_requests_total{type=\"flush\"}"] + 0) " " (v["viommu_deferred_unmaps_total"] + 0) \
				" " (v["viommu_flush_backend_calls_total"] + 0) " " (v["viommu_merged_ranges_total"] + 0) \
				" " int((v["viommu_busy_ns_total"] + 0) / 1000000) \
				" " int((v["viommu_backend_map_ns_total"] + v["viommu_backend_unmap_ns_total"]) / 1000000)
		}
		{ sub(/\r$/, ""); print >logf; fflush(logf) }
		# At each phase end, count what the device did since its begin,
		# at once: the result must not depend on how the VMM exits later.
		/@@LAB-PHASE@@ begin / { begin[$NF] = snap() }
		/@@LAB-PHASE@@ end / && ($NF in begin) && vmm == "vmm" {
			split(begin[$NF], b, " "); split(snap(), e, " ")
			m = e[1] - b[1]; u = e[2] - b[2]; v = e[3] - b[3]; f = e[4] - b[4]; d = e[5] - b[5]
			fc = e[6] - b[6]; mr = e[7] - b[7]; busy = e[8] - b[8]; vms = e[9] - b[9]
		}
		/@@LAB-PHASE@@ end / && ($NF in begin) && vmm != "vmm" {
			cmd = "awk -v b=" begin[$NF] " -v e=" lines() " \"NR > b && NR <= e\" " trace " 2>/dev/null"
			m = u = v = f = d = fc = mr = busy = vms = 0
			while ((cmd | getline l) > 0) {
				if (l ~ /virtio_iommu_map /) m++
				else if (l ~ /virtio_iommu_unmap /) u++
				else if (l ~ /vfio_iommu_map_notify /) v++
			}
			close(cmd)
		}
		/@@LAB-PHASE@@ end / && ($NF in begin) {
			printf "@@LAB-L3@@ %s @@LAB-COUNT@@ {\"phase\":\"%s\",\"map_requests\":%d,\"unmap_requests\":%d,\"flush_requests\":%d,\"deferred_unmaps\":%d,\"flush_vfio_calls\":%d,\"merged_ranges\":%d,\"vfio_calls\":%d,\"device_busy_ms\":%d,\"vfio_ms\":%d}\n", tag, $NF, m, u, f, d, fc, mr, v, busy, vms
			fflush()
		}
		/@@LAB-GUEST@@|@@LAB-GUEST-DONE@@|@@LAB-VMM-EXIT@@/ {
			sub(/.*@@LAB-/, "@@LAB-"); print "@@LAB-L3@@ " tag " " $0; fflush()
		}'
	echo "@@LAB-L3@@ $tag @@LAB-WALL@@ $(($(date +%s) - start))"
	if grep -q '@@LAB-GUEST-DONE@@ rc=0' "$log"; then
		return 0
	fi
	echo "---- guest $tag failed; its serial log and VMM output follow ----"
	cat "$log"
	echo "---- end of guest $tag log ----"
	return 1
}

# guest_crash LOG: the first line of a guest kernel crash in LOG (a double
# fault, a panic, a BUG), quote-free for JSON; empty if none.
guest_crash() {
	grep -m1 -o 'PANIC: double fault\|Kernel panic[^@]*\|BUG: [^@]*' "$1" | cut -c1-80 | tr '"\\' "''"
}

# retry_reason TAG VMM: why the failed guest run TAG may be started over
# (printed), or fails when it may not: the guest kernel crashed or reset
# itself mid-run (the nested lab's emulation, not the code under test), or
# stock QEMU's guest stopped answering until the bound. Never after a fio
# error (a failed verify), and never when our VMM failed on its own.
retry_reason() {
	local log=/tmp/guest-$1.log crash rc
	grep -q '"event":"error"' "$log" && return 1
	crash=$(guest_crash "$log")
	rc=$(sed -n 's/.*@@LAB-VMM-EXIT@@ rc=\([0-9]*\).*/\1/p' "$log" | tail -n 1)
	if [ -n "$crash" ]; then
		echo "guest kernel crashed: $crash"
	elif ! grep -q '"event":"boot"' "$log" && grep -q 'rcu: INFO: rcu_sched detected stalls\|soft lockup' "$log"; then
		# Seen once in ~40 two-vCPU boots: a vCPU stuck from early boot
		# (RCU stall, before /init), under either kernel setting.
		echo "the guest kernel stalled before its init (RCU stall on a vCPU)"
	elif [ "$2" = qemu ] && grep -q 'terminating on signal 15' "$log"; then
		echo "stock QEMU guest hit the $(lab_arg guest_timeout 600) s bound"
	elif [ "$2" = qemu ] && [ "$rc" = 0 ]; then
		# -no-reboot: a guest that resets (a triple fault) ends QEMU with 0.
		echo "the guest reset itself mid-run (stock QEMU exited 0 before the guest finished)"
	elif [ "$2" = vmm ] && { [ "$rc" = 3 ] || [ "$rc" = 4 ]; }; then
		echo "the guest reset itself mid-run (our VMM exited $rc: $([ "$rc" = 3 ] && echo reset || echo triple fault))"
	else
		return 1
	fi
}

