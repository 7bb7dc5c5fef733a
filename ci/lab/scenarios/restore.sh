# Scenario: nothing lost when a run dies. The NVMe goes to nvme (a user's
# host) with 4 MiB of known data at 768 MiB, beyond what the guest writes
# (its write+verify stays in the first 128 MiB, nothing is
# preconditioned). Then:
#  1. a process holds the namespace open (a plain open, as a VM's disk
#     would): viommu-bench refuses, naming the process, nothing bound;
#  2. a process holds it O_EXCL with its descriptor in flight in a socket
#     (hold-excl --hidden: no /proc/PID/fd shows it, only the kernel's
#     EBUSY to an exclusive open does): refused again;
#  3. with both gone the run starts (binds the drive, boots a guest), and
#     is killed with SIGKILL while its guest does I/O: its VMM goes with
#     it, the drive stays on vfio-pci with its state file;
#  4. a rerun refuses, naming the killed run and offering --restore;
#  5. viommu-bench --restore gives the drive back to nvme, and the known
#     data reads back intact.

check() { lab_check "$@"; } # NAME OK DETAIL (host-lib.sh)
driver() { basename "$(readlink "/sys/bus/pci/devices/$BDF/driver" 2>/dev/null)" 2>/dev/null; }
yes_no() { if eval "$1"; then echo true; else echo false; fi; }
# The namespace the host sees, once the drive is on nvme (nvme0n1).
ns_name() { ls /sys/bus/pci/devices/"$BDF"/nvme/nvme*/ 2>/dev/null | grep -m1 -x 'nvme[0-9]*n[0-9]*'; }
first_line() { printf '%s' "$1" | grep -m1 "$2"; }
status=0
COLUMN=ours+stock:vmm:viommu:stock
KNOWN_AT_MIB=768

# 0. The drive on nvme, with known data where the guest does not write.
echo "$BDF" >/sys/bus/pci/drivers/vfio-pci/unbind
echo >"/sys/bus/pci/devices/$BDF/driver_override"
echo "$BDF" >/sys/bus/pci/drivers_probe
wait_for '[ -n "$(ns_name)" ] && [ -b "/dev/$(ns_name)" ]' 300
ns=$(ns_name)
dev=/dev/$ns
dd if=/dev/urandom of=/tmp/known bs=1M count=4 2>/dev/null
dd if=/tmp/known of="$dev" bs=1M seek=$KNOWN_AT_MIB conv=fsync 2>/dev/null
sync
echo 3 >/proc/sys/vm/drop_caches
want=$(sha256sum </tmp/known | cut -d' ' -f1)
read_known() { dd if="$1" bs=1M skip=$KNOWN_AT_MIB count=4 2>/dev/null | sha256sum | cut -d' ' -f1; }
got=$(read_known "$dev")
check known-data "$(yes_no '[ "$(driver)" = nvme ] && [ -n "$ns" ] && [ "$got" = "$want" ]')" \
	"$BDF on $(driver); $dev: 4 MiB at $KNOWN_AT_MIB MiB, sha256 $(echo "$want" | cut -c1-12)..., read back $(echo "$got" | cut -c1-12)..." || status=1

# The run as a user starts it: the tool binds the drive itself.
bench_args | grep -vx -- --no-bind | without_flag --columns >/tmp/bench.args
printf '%s\n' --columns "$COLUMN" >>/tmp/bench.args

# 1. Open in a process: refused, the process named, nothing bound.
sh -c 'exec 3<"$1"; exec sleep 600' sh "$dev" &
holder=$!
wait_for "[ \"\$(readlink /proc/$holder/fd/3)\" = $dev ] && [ \"\$(cat /proc/$holder/comm)\" = sleep ]" 50
out=$(run_bench)
rc=$?
check refuses-open-namespace "$(yes_no '[ $rc -eq 2 ] && printf "%s" "$out" | grep -q "$dev is open in pid $holder (sleep)" && [ "$(driver)" = nvme ]')" \
	"holder pid $holder; exit $rc, $BDF on $(driver): $(first_line "$out" "is open in\|in use")" || status=1
kill $holder
wait $holder 2>/dev/null

# 2. Held O_EXCL with no descriptor in any /proc/PID/fd: the kernel's
#    EBUSY is the only sign.
hold-excl --hidden "$dev" >/tmp/hold.out 2>&1 &
holder=$!
wait_for 'grep -q "^held" /tmp/hold.out' 50
shown=$(for f in /proc/[0-9]*/fd/*; do [ "$(readlink "$f" 2>/dev/null)" = "$dev" ] && echo "$f"; done)
out=$(run_bench)
rc=$?
check refuses-exclusive-holder "$(yes_no '[ -z "$shown" ] && [ $rc -eq 2 ] && printf "%s" "$out" | grep -q "$dev is in use: the kernel refuses an exclusive open (EBUSY)" && [ "$(driver)" = nvme ]')" \
	"hold-excl: $(cat /tmp/hold.out); in /proc/*/fd: ${shown:-nowhere}; exit $rc, $BDF on $(driver): $(first_line "$out" "in use")" || status=1
kill $holder
wait $holder 2>/dev/null

# 3. Both gone: the run starts; killed while its guest does I/O.
run_bench >/tmp/killed.log 2>&1 &
wait_for '[ "$(driver)" = vfio-pci ] && grep -qE "ours\+stock: (verify|randread)" /tmp/killed.log' 3000
bench=$(pidof viommu-bench)
vmm=$(pidof vmm)
running=$(yes_no '[ "$(driver)" = vfio-pci ] && [ -n "$bench" ] && [ -n "$vmm" ] && grep -qE "ours\+stock: (verify|randread)" /tmp/killed.log')
check runs-once-released "$running" \
	"$BDF on $(driver); viommu-bench pid ${bench:-none}, vmm pid ${vmm:-none}; $(grep -c '' /tmp/killed.log) lines: $(grep 'ours+stock:' /tmp/killed.log | tail -n 1)" || status=1
[ -n "$bench" ] && kill -9 $bench
wait_for '[ -z "$(pidof viommu-bench)" ] && [ -z "$(pidof vmm)" ]' 100
left=$(pidof vmm)
check vmm-goes-with-the-tool "$(yes_no '[ "$running" = true ] && [ -z "$left" ]')" \
	"after kill -9 of viommu-bench ${bench:-none}: vmm ${left:+still runs as pid $left}${left:-gone}" || status=1
state=/run/viommu-bench/$BDF.json
check left-on-vfio "$(yes_no '[ "$(driver)" = vfio-pci ] && [ -f "$state" ]')" \
	"$BDF on $(driver); state file: $(cat "$state" 2>/dev/null || echo none)" || status=1

# 4. A rerun names the killed run and offers --restore; takes nothing.
out=$(run_bench)
rc=$?
check rerun-offers-restore "$(yes_no '[ $rc -eq 2 ] && printf "%s" "$out" | grep -q "left there by viommu-bench (pid $bench" && printf "%s" "$out" | grep -q "viommu-bench --restore $BDF" && [ "$(driver)" = vfio-pci ]')" \
	"exit $rc, $BDF on $(driver): $(first_line "$out" "vfio-pci")" || status=1

# 5. --restore: back on nvme, the known data intact.
out=$(viommu-bench --restore "$BDF" 2>&1)
rc=$?
wait_for '[ "$(driver)" = nvme ] && [ -n "$(ns_name)" ] && [ -b "/dev/$(ns_name)" ]' 300
check restored "$(yes_no '[ $rc -eq 0 ] && [ "$(driver)" = nvme ] && [ ! -f "$state" ]')" \
	"exit $rc, $BDF on $(driver): $(printf '%s' "$out" | tail -n 1)" || status=1
ns=$(ns_name)
echo 3 >/proc/sys/vm/drop_caches
got=$([ -n "$ns" ] && read_known "/dev/$ns")
check data-intact "$(yes_no '[ -n "$ns" ] && [ "$got" = "$want" ]')" \
	"/dev/${ns:-?}: 4 MiB at $KNOWN_AT_MIB MiB, sha256 ${got:-unreadable} (wanted $want)" || status=1
return $status
