# Scenario: a dual-port NVMe (lab --nvme-multipath: an NVMe subsystem of
# two controllers sharing namespace 1). host-init bound the first
# controller ($BDF) to vfio-pci; the second stays on nvme. viommu-bench must
# find the namespace through the controller and its subsystem (native
# multipath: the controller's sysfs directory holds nvmeXcYnZ, the
# namespace's block device is the subsystem's nvmeXnY), refuse while it is
# mounted, and run with $BDF alone passed through: VFIO takes a whole IOMMU
# group, and the second controller is another PCI function in a group of
# its own, so it keeps serving the namespace to the lab host.

check() { lab_check "$@"; } # NAME OK DETAIL (host-lib.sh)
driver() { basename "$(readlink "/sys/bus/pci/devices/$1/driver" 2>/dev/null)" 2>/dev/null; }
group() { basename "$(readlink "/sys/bus/pci/devices/$1/iommu_group" 2>/dev/null)" 2>/dev/null; }
yes_no() { if eval "$1"; then echo true; else echo false; fi; }
status=0

# 1. Two controllers, in two IOMMU groups; the second on nvme.
ctrls=$(for d in /sys/bus/pci/devices/*; do [ "$(cat "$d/class")" = 0x010802 ] && echo "${d##*/}"; done)
other=$(echo "$ctrls" | grep -vx "$BDF" | head -n 1)
check two-controllers "$(yes_no '[ "$(echo "$ctrls" | wc -l)" -eq 2 ] && [ -n "$other" ] && [ "$(group "$BDF")" != "$(group "$other")" ]')" \
	"controllers: $(echo $ctrls); IOMMU groups $(group "$BDF") and $(group "$other"); $other on $(driver "$other")" || status=1

# 2. $BDF back on nvme: its namespace shows as a path device nvmeXcYnZ.
echo "$BDF" >/sys/bus/pci/drivers/vfio-pci/unbind
echo >"/sys/bus/pci/devices/$BDF/driver_override"
echo "$BDF" >/sys/bus/pci/drivers_probe
paths() { ls -d /sys/bus/pci/devices/"$BDF"/nvme/nvme*/nvme*c*n* 2>/dev/null | sed 's|.*/||'; }
wait_for '[ -n "$(paths)" ]' 300
p=$(paths | head -n 1)
ns=$(echo "$p" | sed 's/c[0-9]*n/n/')
wait_for "[ -b /dev/$ns ]" 300
check native-multipath "$(yes_no '[ -n "$p" ] && [ -b "/dev/$ns" ] && ! ls /sys/bus/pci/devices/"$BDF"/nvme/nvme*/ | grep -qx "nvme[0-9]*n[0-9]*"')" \
	"$BDF on $(driver "$BDF"); its path devices: $(paths | tr '\n' ' '); the namespace: /dev/$ns" || status=1

# 3. The namespace mounted: refused, nothing bound.
bench_args | grep -vx -- --no-bind >/tmp/bench.args
mkdir -p /mnt/ns
mke2fs -F "/dev/$ns" >/dev/null 2>&1
mount -t ext2 "/dev/$ns" /mnt/ns
mounted=$(grep "^/dev/$ns " /proc/mounts)
out=$(run_bench)
rc=$?
check refuses-mounted "$(yes_no '[ -n "$mounted" ] && [ $rc -eq 2 ] && printf "%s" "$out" | grep -q "/dev/$ns is mounted on /mnt/ns" && [ "$(driver "$BDF")" = nvme ]')" \
	"mounted: ${mounted:-no}; exit $rc, $BDF on $(driver "$BDF"): $(printf '%s' "$out" | grep -m1 'mounted on')" || status=1
umount /mnt/ns

# 4. The run: the tool binds $BDF alone; the other port stays on nvme.
run_bench
rc=$?
check bench-run "$(yes_no '[ $rc -eq 0 ]')" "viommu-bench exit $rc" || status=1
wait_for '[ "$(driver "$BDF")" = nvme ]' 100
check driver-restored "$(yes_no '[ "$(driver "$BDF")" = nvme ] && [ "$(driver "$other")" = nvme ]')" \
	"after: $BDF on $(driver "$BDF"), $other on $(driver "$other")" || status=1
return $status
