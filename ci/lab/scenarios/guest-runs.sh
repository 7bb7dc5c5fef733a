# Scenario: boot the guest once per entry of lab.runs=TAG:VMM:IOMMU:KERNEL[:OPT],...
# OPT strict|lazy picks the guest's IOMMU domain mode (iommu.strict=1|0).
status=0
for spec in $(lab_arg runs "" | tr ',' ' '); do
	IFS=: read -r tag vmm iommu kernel opt <<SPEC
$spec
SPEC
	case "$opt" in
	strict) extra=iommu.strict=1 ;;
	lazy) extra=iommu.strict=0 ;;
	*) extra= ;;
	esac
	run_guest "$tag" "$vmm" "$iommu" "$kernel" "$extra" || status=1
done
return $status
