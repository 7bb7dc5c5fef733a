# Scenario: our VFIO DMA backend against the real kernel, no guest. Each
# check prints @@LAB-CHECK@@ {json}; see crates/vfio-lab-check.
vfio-lab-check --device "/sys/bus/pci/devices/$BDF"
