//! Emulated platform devices and the buses they sit on.

pub mod console;
pub mod exit;
pub mod power;
pub mod serial;
pub mod vfio_pci;
pub mod viommu;
pub mod virtio;
