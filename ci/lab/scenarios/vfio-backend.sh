# Scenario: our VFIO DMA backend against the real kernel, no guest. Each
# check prints @@LAB-CHECK@@ {json}; see crates/lab-checks.
vfio-lab-check --device "/sys/bus/pci/devices/$BDF"
