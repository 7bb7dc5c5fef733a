# Scenario: a guest kernel brought from outside the tree's cache, as a user
# brings one: the lab's bzImage copied to a path of its own with no config
# file that goes with it (a stale .config beside it instead). viommu-bench
# must read the kernel's embedded config (CONFIG_IKCONFIG, which
# guest-patches' kernels have) before anything is bound, prefer it to the
# stale file, and boot it; a kernel whose embedded config builds the NVMe
# driver as a module is refused before the drive leaves nvme.

check() { lab_check "$@"; } # NAME OK DETAIL (host-lib.sh)
driver() { basename "$(readlink "/sys/bus/pci/devices/$BDF/driver" 2>/dev/null)" 2>/dev/null; }
yes_no() { if eval "$1"; then echo true; else echo false; fi; }
# bench_args with --kernel-stock KERNEL and without --no-bind
args_with() {
	bench_args | grep -vx -- --no-bind | awk -v k="$1" 'p { print k; p = 0; next } $0 == "--kernel-stock" { p = 1 } { print }' >/tmp/bench.args
}
status=0

own=/tmp/own-kernel
mkdir -p "$own/good" "$own/broken"
cp "/lab/guest/$(lab_arg kernel_stock baseline).bzImage" "$own/good/vmlinuz-own"
printf 'CONFIG_PCI=y\n' >"$own/good/.config"
# An uncompressed image (as scripts/extract-ikconfig reads one) whose
# embedded config has the NVMe driver as a module.
{
	printf 'kernel data IKCFG_ST'
	printf 'CONFIG_PCI=y\nCONFIG_BLK_DEV_NVME=m\n' | gzip -c
	printf 'IKCFG_ED more kernel data'
} >"$own/broken/vmlinux"

# The drive on its usual driver, as on a user's host.
echo "$BDF" >/sys/bus/pci/drivers/vfio-pci/unbind
echo >"/sys/bus/pci/devices/$BDF/driver_override"
echo "$BDF" >/sys/bus/pci/drivers_probe
wait_for '[ "$(driver)" = nvme ]' 100

# 1. The kernel without the NVMe driver built in: refused, nothing bound.
args_with "$own/broken/vmlinux"
out=$(run_bench)
rc=$?
check refuses-module-kernel "$(yes_no '[ $rc -eq 2 ] && printf "%s" "$out" | grep -q "its embedded config (CONFIG_IKCONFIG) does not build in .*CONFIG_BLK_DEV_NVME (=m)" && [ "$(driver)" = nvme ]')" \
	"exit $rc, $BDF on $(driver): $(printf '%s' "$out" | grep -m1 'embedded config')" || status=1

# 2. The copied kernel: its embedded config read (not the stale file), booted.
args_with "$own/good/vmlinuz-own"
# Its output goes on to the console as it comes (the guests' progress).
IFS='
'
# shellcheck disable=SC2046
{
	viommu-bench $(cat /tmp/bench.args)
	echo $? >/tmp/own.rc
} 2>&1 | tee /tmp/own.out
unset IFS
rc=$(cat /tmp/own.rc)
check embedded-config-read "$(yes_no 'grep -q "vmlinuz-own: its embedded config (CONFIG_IKCONFIG) builds in every option the guest needs" /tmp/own.out')" \
	"$(grep -m1 'vmlinuz-own' /tmp/own.out)" || status=1
check bench-run "$(yes_no '[ $rc -eq 0 ]')" "viommu-bench exit $rc" || status=1
wait_for '[ "$(driver)" = nvme ]' 100
check driver-restored "$(yes_no '[ "$(driver)" = nvme ]')" "after: $(driver)" || status=1
return $status
