# Scenario: our VMM's iommufd backend on a lab host that has it (our 6.12
# lab host kernel: CONFIG_IOMMUFD, CONFIG_VFIO_DEVICE_CDEV). First the
# backend against the real kernel, as vfio-backend does for the type1
# container: through an IOAS (--backend iommufd), then with maps served as
# IOMMU_IOAS_COPY from memory pinned once (--backend iommufd-pinned); each
# check prints @@LAB-CHECK@@ {json}. Then the guests of lab.runs, our VMM
# with --vfio-backend iommufd (and --pin-guest-ram), run by viommu-bench.
rc=0
vfio-lab-check --backend iommufd --device "/sys/bus/pci/devices/$BDF" || rc=1
vfio-lab-check --backend iommufd-pinned --device "/sys/bus/pci/devices/$BDF" || rc=1
bench_args >/tmp/bench.args
run_bench
brc=$?
# 1: some guest failed or hung, which the lab judges from the cells.
[ $brc -le 1 ] && [ $rc = 0 ]
