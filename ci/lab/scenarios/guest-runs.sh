# Scenario: boot the guest once per entry of lab.runs=TAG:VMM:IOMMU:KERNEL[:OPTS],...
# OPTS is a '+'-separated list of guest kernel parameters, the aliases
# strict (iommu.strict=1) and lazy (iommu.strict=0), and flags for the VMM
# (anything starting with --, e.g. --pool-threshold=128K).
status=0
for spec in $(lab_arg runs "" | tr ',' ' '); do
	IFS=: read -r tag vmm iommu kernel opts <<SPEC
$spec
SPEC
	extra= flags=
	for o in $(echo "$opts" | tr '+' ' '); do
		case "$o" in
		strict) o=iommu.strict=1 ;;
		lazy) o=iommu.strict=0 ;;
		--*)
			flags="$flags $o"
			continue
			;;
		esac
		extra="$extra $o"
	done
	run_guest "$tag" "$vmm" "$iommu" "$kernel" "$extra" "$flags" && continue
	# The nested lab's KVM-on-TCG sometimes crashes or resets a guest kernel
	# (seen: a double fault at syscall entry, a silent reset, in any VMM).
	# Such a run is started over once and the lab reports it as a warning
	# (retry_reason in host-lib.sh says which failures qualify).
	reason=$(retry_reason "$tag" "$vmm") || { status=1; continue; }
	echo "@@LAB-RETRY@@ {\"tag\":\"$tag\",\"reason\":\"$reason\"}"
	run_guest "$tag" "$vmm" "$iommu" "$kernel" "$extra" "$flags" || status=1
done
return $status
