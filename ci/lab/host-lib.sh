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

# lab_arg NAME DEFAULT: value of lab.NAME= on the lab host's command line
# (LAB_CMDLINE: another file to read it from, for the runner's tests).
lab_arg() {
	v=$2
	for a in $(cat "${LAB_CMDLINE:-/proc/cmdline}"); do
		case "$a" in "lab.$1="*) v=${a#*=} ;; esac
	done
	echo "$v"
}

# bench_args: (with the default IFS) the viommu-bench flags of this lab host's guests, from the
# lab.* knobs the runner put on the command line (one flag or value a line).
# The tool runs here as on any host: the NVMe is on vfio-pci already
# (host-init bound it: --no-bind), the guest kernels and image are the lab's:
# lab.kernel_stock and lab.kernel_patched name the /lab/guest/NAME.bzImage
# the tool's two kernels are (baseline-6.12, patched...).
bench_args() {
	printf '%s\n' --device "$BDF" --destroy-data "$BDF" --no-bind \
		--kernel-stock "/lab/guest/$(lab_arg kernel_stock baseline).bzImage" \
		--kernel-patched "/lab/guest/$(lab_arg kernel_patched patched).bzImage" \
		--initramfs /lab/guest/initramfs.cpio --vmm /lab/bin/vmm --qemu "$(lab_arg qemu qemu-system-x86_64)" \
		--columns "$(lab_arg runs "")" --mode "$(lab_arg mode smoke)" --bs "$(lab_arg bs 4k)" \
		--runtime "$(lab_arg runtime 8)" --ramp "$(lab_arg ramp 0)" --numjobs "$(lab_arg numjobs 1)" --iodepth "$(lab_arg iodepth 64)" --rw "$(lab_arg rw randread)" \
		--guest-cpus "$(lab_arg guest_cpus 1)" --rounds 1 --first-round "$(lab_arg round 1)" \
		--stall-seconds "$(lab_arg stall 60)" --cell-timeout "$(lab_arg guest_timeout 600)" \
		--retries "$(lab_arg retries 1)" --serial-report --out /tmp/bench --cache /tmp/bench-cache
	# More versions of a variant (lab.kernels=baseline-7.3,...): by name.
	# A distribution's kernel package: its tree (boot/, usr/lib/modules/).
	for k in $(lab_arg kernels "" | tr ',' ' '); do
		if [ -d "/lab/guest/$k/boot" ]; then
			printf '%s\n' --kernel "$k=$(ls /lab/guest/$k/boot/vmlinuz-* | head -n 1)"
		else
			printf '%s\n' --kernel "$k=/lab/guest/$k.bzImage"
		fi
	done
	[ "$(lab_arg kvm_exits 0)" = 1 ] && echo --kvm-exits
	[ "$(lab_arg breakdown 0)" = 1 ] && echo --breakdown
	[ "$(lab_arg retry_hung 0)" = 1 ] && echo --retry-hung
	# Guest RAM in the 2 MiB pages the lab host reserved at boot (hugepages=).
	[ "$(lab_arg hugepages 0)" = 1 ] && echo --hugepages
	# fio's buffers in the guests' own 2 MiB pages.
	[ "$(lab_arg guest_hugepages 0)" = 1 ] && echo --guest-hugepages
	# Each vCPU thread on a CPU of its own, the rest on the other.
	[ "$(lab_arg pin_vcpus 0)" = 1 ] && echo --pin-vcpus
	printf '%s\n' --idle-ms "$(lab_arg idle_ms 0)"
	# The lab's emulated 1 GiB drive has no fast path for unwritten
	# blocks worth measuring around, and its results so far read it
	# unconditioned: no preconditioning unless lab.precondition= says so.
	printf '%s\n' --precondition "$(lab_arg precondition none)"
	return 0
}

# without_flag FLAG: bench_args' lines (stdin) without FLAG and its value
# (e.g. --initramfs: the tool then builds its guest image from the host's
# fio and busybox).
without_flag() {
	awk -v f="$1" 'skip { skip = 0; next } $0 == f { skip = 1; next } { print }'
}

# run_bench: viommu-bench with the flags in /tmp/bench.args (bench_args'
# output, one flag or value a line, so values may hold spaces), its output
# on stdout and stderr; its exit status.
run_bench() {
	local rc
	IFS='
'
	# shellcheck disable=SC2046
	viommu-bench $(cat /tmp/bench.args) 2>&1
	rc=$?
	unset IFS
	return $rc
}

# guest_crash LOG: the first line of a guest kernel crash in LOG (a double
# fault, a panic, a BUG), quote-free for JSON; empty if none. (The bench
# tool has its own for the guests it runs; this one is for the scenario
# scripts that start a VMM themselves, e.g. vmm-exits.)
guest_crash() {
	grep -m1 -o 'PANIC: double fault\|Kernel panic[^@]*\|BUG: [^@]*' "$1" | cut -c1-80 | tr '"\\' "''"
}

# json_text TEXT: TEXT made safe inside a JSON string of a marker line:
# quotes, backslashes and every control character (newlines, the guest
# console's carriage returns) become spaces, cut to 300 characters.
json_text() {
	printf '%s' "$1" | tr '"\\\000-\037\177' ' ' | cut -c1-300
}

# lab_skip NAME...: true when every NAME passed on an earlier lab host of
# this round (lab.skip, the runner's list after a lab host crashed or
# wedged): a scenario of checks resumes where the crash stopped it
# instead of starting over (a check and the checks that depend on it are
# named together).
lab_skip() {
	done_list=",$(lab_arg skip ''),"
	for n in "$@"; do
		case "$done_list" in *",$n,"*) ;; *) return 1 ;; esac
	done
	echo "@@LAB-SKIP@@ $* (passed on an earlier lab host)"
}

# lab_check NAME OK DETAIL: print a check's @@LAB-CHECK@@ line (OK is true or
# false); returns 0 when OK is true.
lab_check() {
	printf '@@LAB-CHECK@@ {"name":"%s","ok":%s,"detail":"%s"}\n' "$1" "$2" "$(json_text "$3")"
	[ "$2" = true ]
}
