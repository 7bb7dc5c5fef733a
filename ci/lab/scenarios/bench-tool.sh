# Scenario: viommu-bench itself, as a user runs it: it refuses to start
# without --destroy-data, binds the NVMe to vfio-pci from the driver it is
# on, runs (one round, lab.runs), and gives the drive back to that driver.

check() { lab_check "$@"; } # NAME OK DETAIL (host-lib.sh)
driver() { basename "$(readlink "/sys/bus/pci/devices/$BDF/driver" 2>/dev/null)" 2>/dev/null; }
status=0

# 1. No --destroy-data: exit 2, nothing touched.
out=$(viommu-bench --device "$BDF" --no-bind --columns "$(lab_arg runs "")" --kernel-stock "/lab/guest/$(lab_arg kernel_stock baseline).bzImage" 2>&1)
rc=$?
ok=false
[ $rc -eq 2 ] && printf '%s' "$out" | grep -q -- "--destroy-data is missing" && ok=true
check refuses-without-consent $ok "exit $rc: $out" || status=1

# 2. Give the drive to its usual driver (nvme), as on a user's host.
echo "$BDF" >/sys/bus/pci/drivers/vfio-pci/unbind
echo >"/sys/bus/pci/devices/$BDF/driver_override"
echo "$BDF" >/sys/bus/pci/drivers_probe
wait_for '[ "$(driver)" = nvme ]' 100
before=$(driver)
check starts-on-nvme "$([ "$before" = nvme ] && echo true || echo false)" "driver before: ${before:-none}" || status=1

# 3. The run: the tool binds vfio-pci itself (no --no-bind) and restores.
bench_args | grep -vx -- --no-bind >/tmp/bench.args
run_bench
rc=$?
check bench-run "$([ $rc -eq 0 ] && echo true || echo false)" "viommu-bench exit $rc" || status=1
wait_for '[ "$(driver)" = "$before" ]' 100
after=$(driver)
check driver-restored "$([ -n "$before" ] && [ "$after" = "$before" ] && echo true || echo false)" "before: ${before:-none}, after: ${after:-none}" || status=1
return $status
