# Scenario: a user's VM. The lab host's NVMe holds a Debian 13 root from
# the start (ci/lab/debian-vm: Debian's 6.12 kernel, its initramfs-tools
# initramfs with virtio_iommu and nvme in /etc/initramfs-tools/modules,
# systemd, a getty on ttyS0, fio). Our VMM boots that root's kernel and
# initramfs (/lab/distro: the files of its /boot) with root= on the NVMe
# behind our virtio-iommu and, when the lab host has an igb (lab.nic=igb),
# one of its VFs as a second endpoint. The scenario then does what a user
# at the console does, through the VMM's stdin (the serial console's
# input): logs in as root, runs fio with verify on a file of the root
# filesystem, gives the VF an address, pings the lab host's PF and sends a
# file each way (checksums compared) while fio runs again, reads both
# endpoints in the VMM's metrics, reboots it in place three times while
# fio writes (the guest's reset register, the VMM's API, a triple fault),
# each boot verifying what fio wrote before it, then fio data again, with
# its host mappings gone at the reset and the VMM's memory apart from
# guest RAM where the first boot left it, and powers the VM off. Then what a user
# without the initramfs line or with a kernel without the driver meets:
# the same root under Debian 12's cloud kernel (no virtio-iommu driver,
# NVMe built in), where the VMM must say so in one line when the guest
# turns the NVMe's bus mastering on, and under Debian's own initramfs (no
# virtio_iommu), which gives up waiting for the root with nothing
# attached. Each step is a check with the seconds since its VMM started;
# the guests' consoles are printed.

DVM=/lab/distro
DVM_KERNEL=$DVM/vmlinuz
DVM_INITRD=$DVM/initrd.img
DVM_LOG=/tmp/distro-vm.console
DVM_IN=/tmp/distro-vm.in
DVM_SOCK=/tmp/distro-vm.sock
# The lab host's PF is .1, the VM's VF .2.
DVM_NET=10.77.0
DVM_CMDLINE="console=ttyS0 root=/dev/nvme0n1p1 rw panic=-1"
# fio on the root filesystem: random writes of mixed sizes, every block
# read back and checked (crc32c), through the guest's page cache bypassed.
DVM_FIO="fio --name=dvm --filename=/root/fio.dat --size=64M --rw=randwrite --bsrange=4k-128k --ioengine=libaio --iodepth=16 --direct=1 --verify=crc32c --verify_fatal=1"

uptime_s() { cut -d' ' -f1 /proc/uptime; }
# plain [FILE]: a guest console (FILE, else stdin) as text (no colours,
# cursor moves or control characters but tabs and newlines).
plain() {
	esc=$(printf '\033')
	sed "s/$esc\[[0-9;?]*[A-Za-z]//g" "$@" | tr -d '\000-\010\013-\037\177'
}
# console: the guest's console since its current boot began (dvm_from:
# the console's size when the reboot was asked for).
console() { tail -c +$((${dvm_from:-0} + 1)) "$DVM_LOG"; }
# since: seconds since the VMM started, one decimal.
since() { awk -v a="$dvm_t0" -v b="$(uptime_s)" 'BEGIN { printf "%.1f", b - a }'; }

# vf_setup: the igb PF up with $DVM_NET.1, one VF made and bound to
# vfio-pci (no host driver probes it first); VF=its BDF.
vf_setup() {
	pf=
	for d in /sys/bus/pci/devices/*; do
		[ "$(cat "$d/vendor"):$(cat "$d/device")" = 0x8086:0x10c9 ] && pf=$d && break
	done
	[ -n "$pf" ] || { vf_why="no igb PF (8086:10c9) on the lab host's PCI bus"; return 1; }
	pf_if=$(ls "$pf/net" 2>/dev/null | head -n 1)
	[ -n "$pf_if" ] || { vf_why="the igb PF ${pf##*/} has no network interface (igb driver)"; return 1; }
	ip link set "$pf_if" up && ip addr add "$DVM_NET.1/24" dev "$pf_if" || { vf_why="cannot bring $pf_if up"; return 1; }
	wait_for "[ \"\$(cat /sys/class/net/$pf_if/carrier 2>/dev/null)\" = 1 ]" 100 || { vf_why="$pf_if has no carrier"; return 1; }
	echo 0 >"$pf/sriov_drivers_autoprobe"
	echo 1 >"$pf/sriov_numvfs" || { vf_why="sriov_numvfs=1 refused on ${pf##*/}"; return 1; }
	VF=$(basename "$(readlink "$pf/virtfn0")")
	vd=/sys/bus/pci/devices/$VF
	echo vfio-pci >"$vd/driver_override"
	echo "$VF" >/sys/bus/pci/drivers_probe
	vf_group=$(basename "$(readlink "$vd/iommu_group")")
	wait_for "[ -c /dev/vfio/$vf_group ]" 100 || { vf_why="no /dev/vfio/$vf_group after binding $VF to vfio-pci"; return 1; }
	vf_why="PF ${pf##*/} ($pf_if, $DVM_NET.1) VF $VF $(cat "$vd/vendor"):$(cat "$vd/device") in IOMMU group $vf_group: $(ls "/sys/kernel/iommu_groups/$vf_group/devices" | tr '\n' ' ')"
}

dvm_start() {
	rm -f "$DVM_IN" "$DVM_SOCK" && mkfifo "$DVM_IN"
	# Info: the VMM's exits and reboots are in the console log too.
	RUST_LOG=info vmm --kernel "$DVM_KERNEL" --initrd "$DVM_INITRD" --cmdline "$DVM_CMDLINE" --memory 1024M --cpus 1 --on-triple-fault restart \
		--vfio "/sys/bus/pci/devices/$BDF" ${VF:+--vfio "/sys/bus/pci/devices/$VF"} --viommu \
		--api-socket "$DVM_SOCK" <"$DVM_IN" >"$DVM_LOG" 2>&1 &
	pid=$!
	dvm_t0=$(uptime_s) dvm_from=0 dvm_sfx=
	# The console's input stays open (the VMM's stdin thread ends at EOF).
	exec 3>"$DVM_IN"
}

# dvm_wait PATTERN SECONDS: wait until the guest's console shows PATTERN
# (grep -E), at most SECONDS, while the VMM runs; a progress line a
# minute (the lab takes a lab host silent for 5 min for wedged).
dvm_wait() {
	start=$(date +%s) size=0 grew=$(date +%s) told=
	report=$((start + 60))
	while ! console | grep -aqE "$1"; do
		kill -0 "$pid" 2>/dev/null || { dvm_why="the VMM exited before '$1'"; return 1; }
		now=$(date +%s)
		[ $((now - start)) -ge "$2" ] && { dvm_why="no '$1' within $2 s"; return 1; }
		if [ "$now" -ge "$report" ]; then
			echo "@@LAB-PROGRESS@@ distro-vm: waiting for '$1', $(since) s, console $(stat -c %s "$DVM_LOG") bytes"
			report=$((now + 60))
		fi
		bytes=$(stat -c %s "$DVM_LOG")
		[ "$bytes" = "$size" ] || { size=$bytes grew=$now; }
		# A console silent for 2 min: where the guest is, once.
		if [ -z "$told" ] && [ $((now - grew)) -ge 120 ]; then
			dvm_liveness
			told=1
		fi
		sleep 0.2
	done
}

# dvm_liveness: the guest's vCPUs and the VMM's liveness gauges now (a
# guest whose console stopped: halted or spinning, the virtio-iommu's
# queue, the UART), and the console's last lines.
dvm_liveness() {
	echo "[distro-vm] the console has been silent for 120 s at $(since) s; its last lines:"
	plain "$DVM_LOG" | tail -n 5
	vmmctl "$DVM_SOCK" vcpus >/tmp/distro-vm.vcpus
	head -c 1500 /tmp/distro-vm.vcpus
	echo
	# A vCPU inside virtio_iommu's module: say so, with the offset (both
	# in the top 2 GiB of the address space: their low 32 bits compared).
	set -- ${dvm_mod:-}
	if [ $# = 2 ]; then
		base=$((0x${1#0xffffffff}))
		for rip in $(grep -o '"rip":"0xffffffff[0-9a-f]*"' /tmp/distro-vm.vcpus | grep -o '0x[0-9a-f]*'); do
			off=$((0x${rip#0xffffffff} - base))
			[ "$off" -ge 0 ] && [ "$off" -lt "$2" ] &&
				echo "[distro-vm] a vCPU at $rip: virtio_iommu+$(printf 0x%x "$off") (the module at $1, $2 bytes)"
		done
	fi
	vmmctl "$DVM_SOCK" metrics | grep -E '^(viommu_requestq_|viommu_thread_|vmm_serial|vmm_vcpu_cpu_ms|vmm_reboots|viommu_requests_total|viommu_endpoint_map_calls)'
	for t in /proc/"$pid"/task/*; do
		echo "[distro-vm] VMM thread $(cat "$t/comm"): state $(cut -d' ' -f3 "$t/stat"), in $(cat "$t/wchan" 2>/dev/null)"
	done
	echo "[distro-vm] the VMM's log lines so far:"
	grep -aE 'Z +(INFO|WARN|ERROR)' "$DVM_LOG" | tail -n 12
}

# dvm_type TEXT: type TEXT and Enter on the guest's console.
dvm_type() { printf '%s\r' "$1" >&3; }

# dvm_cmd NAME SECONDS COMMAND: type COMMAND at the guest's shell and wait
# for the line it ends with, "@@DVM-NAME@@ rc=N" (the typed text echoed
# back never matches: its quotes split the marker); dvm_rc=N.
dvm_cmd() {
	dvm_rc="none (no end marker)"
	dvm_type "$3; echo \"@@DVM-$1\"\"@@ rc=\$?\""
	dvm_wait "@@DVM-$1@@ rc=[0-9]+" "$2" || return 1
	dvm_rc=$(console | grep -aoE "@@DVM-$1@@ rc=[0-9]+" | tail -n 1 | sed 's/.*rc=//')
	[ "$dvm_rc" = 0 ] || dvm_why="exit status $dvm_rc"
	[ "$dvm_rc" = 0 ]
}

# dvm_line KEY: the rest of the guest's last console line "@@DVM-KEY@@ ...".
dvm_line() { last "@@DVM-$1@@ .*" | cut -d' ' -f2-; }

# last REGEX: the last match of REGEX (grep -E) in the guest's console.
last() { console | plain | grep -oE "$1" | tail -n 1; }

# fio_said: the last fio run's error status and its write and read lines.
fio_said() { echo "$(last 'dvm: \(groupid=[^)]*\): err= *[0-9]+'); $(last 'WRITE: bw=[^,]*, [^,]*, io=[^,]*'); $(last 'READ: bw=[^,]*, [^,]*, io=[^,]*')"; }

# step NAME: run dvm_NAME, report its check with the time; false on failure.
step() {
	dvm_why=
	"dvm_$1"
	r=$?
	ok=false
	[ $r = 0 ] && ok=true
	lab_check "distro-vm-$1${dvm_sfx:-}" "$ok" "at $(since) s${dvm_why:+: $dvm_why}${dvm_detail:+; $dvm_detail}"
	dvm_detail=
	return $r
}

dvm_boot() { dvm_wait "distro-vm login:" 1200; }

dvm_login() {
	dvm_type root
	dvm_wait "Password:" 120 || return 1
	dvm_type lab
	dvm_wait "root@distro-vm:~#" 120 || return 1
	dvm_shell=1
	# Kernel messages off the console: what follows is the commands' output.
	dvm_cmd quiet 60 "dmesg -n 1"
}

# The root filesystem is the NVMe's partition, the NVMe behind the
# virtio-iommu (its iommu link, its domain type).
dvm_root() {
	dvm_cmd root 120 'p=$(basename $(readlink -f /sys/block/nvme0n1/device/device)); echo "@@DVM-ROOT@@ $(uname -r) nvme $p iommu $(basename $(readlink /sys/bus/pci/devices/$p/iommu)) domain $(cat /sys/bus/pci/devices/$p/iommu_group/type) root $(grep " / " /proc/mounts | cut -d" " -f1-3) $(systemctl is-system-running)"; echo "@@DVM-MOD@@ $(awk "\$1 == \"virtio_iommu\" { print \$6, \$2 }" /proc/modules)"; [ -e /sys/bus/pci/devices/$p/iommu ] && grep -q "^/dev/nvme0n1p1 / " /proc/mounts'
	r=$?
	dvm_detail=$(dvm_line ROOT)
	# Where the driver's module sits this boot (base, size), for a vCPU
	# found spinning later (dvm_liveness).
	dvm_mod=$(dvm_line MOD)
	return $r
}

dvm_fio() {
	dvm_cmd fio 1200 "$DVM_FIO --output=/root/fio.out; r=\$?; cat /root/fio.out; grep -q 'err= 0' /root/fio.out && (exit \$r)"
	r=$?
	dvm_detail=$(fio_said)
	dvm_fio_size=64M
	return $r
}

# After a reboot: the file the last boot's fio wrote and verified
# ($dvm_fio_size of it), read back and verified again (fio --verify_only
# replays the same job: same seed, offsets and sizes).
dvm_kept() {
	dvm_cmd kept 1200 "$DVM_FIO --size=$dvm_fio_size --verify_only --output=/root/kept.out; r=\$?; cat /root/kept.out; grep -q 'err= 0' /root/kept.out && (exit \$r)"
	r=$?
	dvm_detail="the $dvm_fio_size the boot before wrote, verified: $(fio_said)"
	return $r
}

# The VF in the guest (igbvf): its address, its carrier, ping to the PF.
dvm_vf() {
	dvm_cmd vf 180 'vf=; for n in /sys/class/net/*; do [ "$(basename "$(readlink $n/device/driver)")" = igbvf ] && vf=${n##*/}; done; p=$(basename $(readlink -f /sys/class/net/$vf/device)); echo "@@DVM-VF@@ $vf $p iommu $(basename $(readlink /sys/bus/pci/devices/$p/iommu)) domain $(cat /sys/bus/pci/devices/$p/iommu_group/type)"; ip addr add '"$DVM_NET"'.2/24 dev $vf && ip link set $vf up && for i in $(seq 60); do [ "$(cat /sys/class/net/$vf/carrier)" = 1 ] && break; sleep 1; done && ping -c 3 -W 10 '"$DVM_NET"'.1'
	r=$?
	dvm_detail="$(dvm_line VF); $(last '[0-9]+ packets transmitted, [0-9]+ received.*')"
	return $r
}

# A file each way over the VF while fio writes and verifies on the NVMe:
# the lab host listens (busybox nc), the guest connects (bash's /dev/tcp);
# each side's size and SHA-256 of what it received against the sender's.
DVM_XFER=$((8 << 20))
dvm_xfer() {
	head -c $DVM_XFER /dev/urandom >/tmp/h2g.bin
	h2g=$(sha256sum </tmp/h2g.bin | cut -c1-64)
	rm -f /tmp/g2h.bin
	nc -l -p 5001 </dev/null >/tmp/g2h.bin &
	nc_in=$!
	nc -l -p 5002 </tmp/h2g.bin &
	nc_out=$!
	# fio in the background, again and again until the transfers are
	# done (however fast they go), its status and runs in a file when it
	# ends: 0 RUNS, or 1 RUNS at the first run that failed.
	dvm_cmd fio2 60 "rm -f /root/fio2.rc /root/xfer.done; (r=0 n=0; while [ ! -e /root/xfer.done ]; do $DVM_FIO --size=128M --output=/root/fio2.out || { r=1; break; }; n=\$((n + 1)); done; echo \$r \$n >/root/fio2.rc) & sleep 2"
	dvm_cmd g2h 300 "head -c $DVM_XFER /dev/urandom >/root/g2h.bin && timeout 240 bash -c 'cat /root/g2h.bin >/dev/tcp/$DVM_NET.1/5001'"
	t1=$dvm_rc
	dvm_cmd h2g 300 "timeout 240 bash -c 'cat </dev/tcp/$DVM_NET.1/5002 >/root/h2g.bin'"
	t2=$dvm_rc
	dvm_cmd sums 60 "[ -e /root/fio2.rc ] && o=no || o=yes; touch /root/xfer.done; echo \"@@DVM-SUMS@@ \$(sha256sum </root/g2h.bin | cut -c1-64) \$(sha256sum </root/h2g.bin | cut -c1-64) \$(wc -c </root/h2g.bin) fio-running-after=\$o\""
	kill "$nc_in" "$nc_out" 2>/dev/null
	wait "$nc_in" "$nc_out" 2>/dev/null
	if [ "$t1" != 0 ] || [ "$t2" != 0 ]; then
		# What each side's interface counted, and the guest's kernel on it.
		grep -E "$pf_if" /proc/net/dev
		dvm_cmd netdiag 60 "ip -s link show dev \$vf; dmesg | grep -iE 'igbvf|\$vf|iommu|fault|timeout' | tail -n 20"
	fi
	dvm_cmd fio2wait 1200 "touch /root/xfer.done; while [ ! -e /root/fio2.rc ]; do sleep 1; done; cat /root/fio2.out; echo \"@@DVM-FIO2@@ \$(cat /root/fio2.rc)\"; grep -q 'err= 0' /root/fio2.out && [ \$(cut -d' ' -f1 /root/fio2.rc) = 0 ]"
	r=$?
	dvm_fio_size=128M
	set -- $(dvm_line SUMS)
	g2h=$(sha256sum </tmp/g2h.bin | cut -c1-64)
	got=$(wc -c </tmp/g2h.bin)
	dvm_detail="guest to lab host: $got bytes, $([ "$1" = "$g2h" ] && echo "SHA-256 $g2h as sent" || echo "SHA-256 $g2h, $1 sent") (exit $t1); lab host to guest: $3 bytes, $([ "$2" = "$h2g" ] && echo "SHA-256 $2 as sent" || echo "SHA-256 $2, $h2g sent") (exit $t2); $4, fio status and runs $(dvm_line FIO2); $(fio_said)"
	dvm_why=
	[ $r = 0 ] || dvm_why="fio during the transfer failed"
	[ $r = 0 ] && [ "$got" = $DVM_XFER ] && [ "$3" = $DVM_XFER ] && [ "$1" = "$g2h" ] && [ "$2" = "$h2g" ] && [ "$4" = fio-running-after=yes ]
}

# Both endpoints in the VMM's metrics, each with host map calls.
dvm_metrics() {
	vmmctl "$DVM_SOCK" metrics >/tmp/distro-vm.metrics || { dvm_why="vmmctl metrics failed"; return 1; }
	grep -E '^viommu_endpoint_map_calls' /tmp/distro-vm.metrics
	want=1
	[ -n "${VF:-}" ] && want=2
	busy=$(grep -E '^viommu_endpoint_map_calls[a-z_]*\{endpoint="[^"]+"\} [1-9]' /tmp/distro-vm.metrics | wc -l)
	dvm_detail="$(grep -E '^viommu_endpoint_map_calls' /tmp/distro-vm.metrics | tr '\n' ' ')$(grep -E '^viommu_requests_total\{type="(attach|map)"\}' /tmp/distro-vm.metrics | tr '\n' ' ')"
	[ "$busy" -ge "$want" ] || dvm_why="$busy endpoint(s) with host map calls, want $want"
	[ "$busy" -ge "$want" ]
}

# vmm_rss_kib: the VMM's resident memory apart from guest RAM (its
# mappings of 256 MiB and more; guest RAM is one of 1 GiB), in KiB.
vmm_rss_kib() { awk '/^Size:/ { big = $2 >= 262144 } /^Rss:/ && !big { s += $2 } END { print s + 0 }' "/proc/$pid/smaps"; }

# live_mapped: each endpoint's host mappings now, bytes mapped less bytes
# unmapped, as BDF=BYTES words.
live_mapped() {
	vmmctl "$DVM_SOCK" metrics | awk '
		/^viommu_endpoint_bytes_mapped_total\{/ { split($1, a, "\""); m[a[2]] += $2 }
		/^viommu_endpoint_bytes_unmapped_total\{/ { split($1, a, "\""); u[a[2]] += $2 }
		END { for (e in m) printf "%s=%.0f ", e, m[e] - u[e] }'
}

# dvm_reboot: a reboot in place while fio writes on the root filesystem,
# the dvm_n-th, asked for as $dvm_how says: sysrq (the guest's emergency
# restart: Debian's kernel goes through EFI and the BIOS, so the VMM's
# reset vector stub writes the reset register), api (vmmctl reboot: the
# VMM resets the machine) or triple (the same restart with the kernel's
# reboot type set to a triple fault, which --on-triple-fault restart
# serves in place). Not `systemctl reboot`: with I/O shortly before it,
# Debian's 6.12 virtio-iommu driver can spin for ever in its shutdown
# (docs/distro-kernels.md, "Booted in the lab"). At the new kernel's
# first console line every endpoint's host mappings must be gone (0
# bytes, as before the first boot) and vmm_reboots_total must count it.
dvm_reboot() {
	dvm_cmd bg 60 "fio --name=bg --filename=/root/bg.dat --size=64M --rw=randwrite --bsrange=4k-128k --ioengine=libaio --iodepth=16 --direct=1 --time_based --runtime=900 >/dev/null 2>&1 & sleep 3; kill -0 \$!" || return 1
	before=$(live_mapped)
	if [ "$dvm_how" = triple ]; then
		dvm_cmd rtype 60 'echo triple >/sys/kernel/reboot/type && cat /sys/kernel/reboot/type' || return 1
	fi
	dvm_from=$(stat -c %s "$DVM_LOG")
	case $dvm_how in
	api) vmmctl "$DVM_SOCK" reboot || { dvm_why="vmmctl reboot failed"; return 1; } ;;
	sysrq | triple) dvm_type 'echo b >/proc/sysrq-trigger' ;;
	esac
	dvm_wait 'Linux version' 300 || return 1
	after=$(live_mapped)
	n=$(vmmctl "$DVM_SOCK" metrics | sed -n 's/^vmm_reboots_total //p')
	dvm_detail="$dvm_how while fio wrote; host mappings before: ${before}at the new kernel's first line: ${after}vmm_reboots_total $n"
	[ "$n" = "$dvm_n" ] || dvm_why="vmm_reboots_total ${n:-unread}, want $dvm_n"
	for w in $after; do
		[ "${w#*=}" = 0 ] || dvm_why="${dvm_why:+$dvm_why; }host mappings left: $w"
	done
	[ -n "$after" ] || dvm_why="no endpoint in the metrics"
	[ -z "$dvm_why" ]
}

# The VMM's memory apart from guest RAM after each boot's fio, the first
# boot's against the last: at most DVM_RSS_GROWTH KiB more.
DVM_RSS_GROWTH=16384
dvm_memory() {
	set -- $dvm_rss
	first=$1 max=$1
	for v in "$@"; do [ "$v" -le "$max" ] || max=$v; done
	dvm_detail="VMM RSS without guest RAM after each boot's fio: $dvm_rss KiB; live host mappings then: $dvm_live"
	[ $((max - first)) -le $DVM_RSS_GROWTH ] || dvm_why="grew $((max - first)) KiB, more than $DVM_RSS_GROWTH"
	[ $((max - first)) -le $DVM_RSS_GROWTH ]
}

# dvm_stuck: where a VMM that does not exit is: its threads (state,
# innermost kernel frames) and its vCPUs (vmmctl vcpus).
dvm_stuck() {
	for t in /proc/"$pid"/task/*; do
		echo "[distro-vm] thread $(cat "$t/comm") state $(cut -d' ' -f3 "$t/stat") $(head -n 4 "$t/stack" 2>/dev/null | tr '\n' ' ')"
	done
	vmmctl "$DVM_SOCK" vcpus | head -c 2000
	echo
}

# The VF's interface goes down first. Debian's 6.12 shuts the virtio bus
# down before the PCI devices behind the virtio-iommu (virtio_dev_shutdown
# breaks and resets it: device_shutdown runs in reverse order of
# registration), so every DMA unmap igbvf's shutdown makes after that
# fails in the guest and warns (seen: 405 WARNINGs at dma-iommu.c:841,
# igbvf_suspend -> igbvf_clean_rx_ring -> dma_unmap_page, printed on the
# serial console for over 5 minutes); with the interface down its buffers
# are unmapped while the virtio-iommu still works.
dvm_poweroff() {
	[ -z "${VF:-}" ] || dvm_cmd vfdown 120 'ip link set dev $vf down' || return 1
	# Kernel messages back on the console: the shutdown's are the record.
	dvm_type "dmesg -n 7; poweroff"
	i=0
	while kill -0 "$pid" 2>/dev/null && [ $i -lt 3000 ]; do
		[ $((i % 600)) = 599 ] && echo "@@LAB-PROGRESS@@ distro-vm: powering off, $(since) s, the console's last line: $(plain "$DVM_LOG" | tail -n 1 | cut -c1-160)"
		sleep 0.1
		i=$((i + 1))
	done
	if kill -0 "$pid" 2>/dev/null; then
		dvm_why="the VMM still runs 300 s after poweroff"
		dvm_stuck
		return 1
	fi
	wait "$pid"
	rc=$?
	pid=
	# The VMM's own log lines (tracing: a timestamp ending in Z, the
	# level); its warning about running as root is this scenario's choice.
	errs=$(grep -aE 'Z +ERROR' "$DVM_LOG" | head -n 3 | tr '\n' ' ')
	dvm_detail=$(grep -aE 'Z +WARN' "$DVM_LOG" | grep -v 'without --user' | head -n 3 | tr '\n' ' ')
	warns=$(plain "$DVM_LOG" | grep -c 'WARNING: CPU.*dma-iommu')
	dvm_detail="VMM exit $rc; guest WARNINGs from dma-iommu: $warns${dvm_detail:+; VMM warnings: $dvm_detail}"
	[ "$rc" = 0 ] || dvm_why="VMM exit $rc"
	[ -z "$errs" ] || dvm_why="${dvm_why:+$dvm_why; }VMM errors: $errs"
	[ "$rc" = 0 ] && [ -z "$errs" ]
}

# dvm_term: SIGTERM to the VMM, which must exit with 143.
dvm_term() {
	kill -TERM "$pid"
	wait "$pid"
	rc=$?
	pid=
	[ "$rc" = 143 ] || dvm_why="${dvm_why:+$dvm_why; }VMM exit $rc after SIGTERM, want 143"
	[ "$rc" = 143 ]
}

# Debian 12's cloud kernel (no CONFIG_VIRTIO_IOMMU, no CONFIG_ACPI_VIOT,
# NVMe built in): the VMM's one line when the guest turns the NVMe's bus
# mastering on; then what the guest's NVMe driver meets (its first command
# times out: its DMA reaches nothing), for the record.
dvm_nodriver() {
	dvm_wait 'before attaching any device to the virtio-iommu' 600 || return 1
	warned=$(since)
	dvm_detail="at $warned s: $(last 'the guest turned on DMA.*' | cut -c1-200)"
	if dvm_wait 'nvme nvme0: .*([Tt]imeout|[Dd]isabl|failed|not ready)' 180; then
		dvm_detail="$dvm_detail; then at $(since) s the guest: $(last 'nvme nvme0: .*([Tt]imeout|[Dd]isabl|failed|not ready).*' | cut -c1-160)"
	else
		dvm_detail="$dvm_detail; no NVMe error from the guest within 180 s"
	fi
	dvm_why=
	dvm_term
}

# Debian's own initramfs (no virtio_iommu: MODULES=most leaves it out):
# the NVMe's probe waits for the driver, nothing is ever attached, and
# the initramfs gives up waiting for the root (after rootdelay=30 here;
# Debian's default is 180 s); the VMM has nothing to say.
dvm_stockinitrd() {
	dvm_wait 'Gave up waiting for root' 600 || return 1
	attach=$(vmmctl "$DVM_SOCK" metrics | sed -n 's/^viommu_requests_total{type="attach"} //p')
	dvm_detail="$(last '(Gave up waiting for root|ALERT!).*'); ATTACH requests: ${attach:-none}"
	[ "$attach" = 0 ] || dvm_why="ATTACH requests: ${attach:-unread}, want 0"
	dvm_term && [ "$attach" = 0 ]
}

# other_boot NAME KERNEL INITRD CMDLINE: the same root with another
# kernel or initramfs, the NVMe alone behind the virtio-iommu; check
# dvm_NAME, print the end of its console.
other_boot() {
	DVM_KERNEL=$2 DVM_INITRD=$3 DVM_CMDLINE=$4 DVM_LOG=/tmp/distro-vm-$1.console VF=
	dvm_start
	step "$1" || status=1
	[ -z "$pid" ] || { kill -KILL "$pid" 2>/dev/null; wait "$pid"; }
	exec 3>&-
	echo "---- guest distro-vm-$1: the end of its serial console and VMM output follow ----"
	plain "$DVM_LOG" | tail -n 40
	echo "---- end of guest distro-vm-$1 log ----"
}

status=0
VF=
if [ "$(lab_arg nic none)" = igb ]; then
	vf_setup
	r=$?
	lab_check distro-vm-vf-setup "$([ $r = 0 ] && echo true || echo false)" "$vf_why" || { VF= && status=1; }
fi
echo "@@LAB-PROGRESS@@ distro-vm: booting $(cat "$DVM/RELEASE") from the NVMe $BDF${VF:+ with the VF $VF} behind our virtio-iommu"
dvm_start
for s in boot login root fio; do
	step "$s" || { status=1 && break; }
done
dvm_rss=$(vmm_rss_kib) dvm_live="boot 0: $(live_mapped)"
if [ $status = 0 ] && [ -n "$VF" ]; then
	step vf && step xfer || status=1
fi
kill -0 "$pid" 2>/dev/null && { step metrics || status=1; }
# Three reboots in place, each while fio writes; each boot logs in again,
# verifies what the boot before wrote, writes and verifies fio data on
# the NVMe again and pings over the VF.
if [ $status = 0 ]; then
	dvm_n=0
	for dvm_how in sysrq api triple; do
		dvm_n=$((dvm_n + 1)) dvm_sfx=-r$((dvm_n))
		dvm_shell=
		for s in reboot boot login root kept fio; do
			step "$s" || { status=1 && break 2; }
		done
		dvm_rss="$dvm_rss $(vmm_rss_kib)" dvm_live="$dvm_live; boot $dvm_n: $(live_mapped)"
		[ -z "$VF" ] || step vf || { status=1 && break; }
	done
	dvm_sfx=
	step memory || status=1
fi
if kill -0 "$pid" 2>/dev/null; then
	# Powered off from its shell; a VM never logged into is stopped below.
	[ -z "${dvm_shell:-}" ] || step poweroff || status=1
fi
[ -z "$pid" ] || { kill -KILL "$pid" 2>/dev/null; wait "$pid"; }
exec 3>&-
echo "---- guest distro-vm: its serial console and VMM output follow ----"
plain "$DVM_LOG"
echo "---- end of guest distro-vm log ----"
other_boot nodriver "$DVM/debian12-cloud.vmlinuz" "$DVM/initrd.img" "$DVM_CMDLINE"
other_boot stockinitrd "$DVM/vmlinuz" "$DVM/initrd-stock.img" "$DVM_CMDLINE rootdelay=30"
return $status
