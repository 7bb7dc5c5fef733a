//! The pieces of the `vmm` binary, one module per concern, so each can be
//! unit-tested without KVM.
//!
//! - [`cli`]: flags and their validation
//! - [`layout`]: the guest-physical and port map
//! - [`vm`]: guest memory and the KVM VM
//! - [`vcpu`]: CPUID, MSRs, 64-bit boot state, run loop
//! - [`boot`]: bzImage, initramfs, command line, zero page and e820
//! - [`acpi`]: RSDP, XSDT, FADT, DSDT, MADT, MCFG, VIOT
//! - [`pci`]: root bus, ECAM and 0xcf8 access, config space, BAR allocation
//! - [`devices`]: buses, serial console, power control, VM exit, virtio
//!   (PCI transport, virtio-iommu), VFIO passthrough
//! - [`api`]: the control plane socket (info, metrics, shutdown)
//! - [`device_manager`]: creates the devices, plugs them (VFIO
//!   passthrough, the virtio-iommu on virtio-pci, BAR placement) and
//!   releases them in order
//! - [`error`]: why the VM could not be built or run
//! - [`machine`]: wires the VM from the pieces above, runs it and tears it
//!   down

#![deny(missing_docs)]

pub mod acpi;
pub mod api;
pub mod boot;
pub mod bus;
pub mod cli;
pub mod device_manager;
pub mod devices;
pub mod error;
pub mod host_pci;
pub mod layout;
pub mod machine;
pub mod pci;
pub mod privileges;
pub mod reboot;
pub mod seccomp;
pub mod vcpu;
pub mod vcpu_probe;
pub mod vm;
