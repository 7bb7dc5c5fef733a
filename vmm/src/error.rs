//! Why the VMM could not start or keep running the VM: the one error type
//! of [`crate::machine`] and [`crate::device_manager`].

use crate::{acpi, api, boot, bus, pci, vcpu, vm};

/// Why the VMM could not start or keep running the VM.
#[derive(Debug, thiserror::Error)]
pub enum VmmError {
    /// Memory or the KVM VM.
    #[error(transparent)]
    Vm(#[from] vm::VmError),
    /// vCPU setup.
    #[error(transparent)]
    Vcpu(#[from] vcpu::VcpuError),
    /// Loading the guest.
    #[error(transparent)]
    Boot(#[from] boot::BootError),
    /// Writing the ACPI tables.
    #[error(transparent)]
    Acpi(#[from] acpi::AcpiError),
    /// The control plane socket.
    #[error(transparent)]
    Api(#[from] api::ApiError),
    /// Overlapping device ranges (a VMM bug).
    #[error("cannot place a device")]
    Bus(#[from] bus::BusError),
    /// The PCI windows are full.
    #[error("cannot place a PCI BAR")]
    Bar(#[from] pci::alloc::AllocError),
    /// The PCI bus is full.
    #[error("cannot plug a PCI device")]
    Pci(#[from] pci::PciError),
    /// A device's config space could not be built (a VMM bug).
    #[error("bad PCI configuration space")]
    PciConfig(#[from] pci::config::ConfigError),
    /// The virtio-iommu model refused its configuration.
    #[error("cannot create the virtio-iommu")]
    Viommu(#[from] viommu_device::Error),
    /// A `--vfio` device could not be set up.
    #[error("--vfio {path}: {what}")]
    Vfio {
        /// The device.
        path: String,
        /// What failed, and the fix.
        what: &'static str,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A host resource (eventfd, thread, socket) failed.
    #[error("{what}")]
    Io {
        /// What.
        what: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A KVM call failed.
    #[error("KVM {what} failed")]
    Kvm {
        /// Which call.
        what: &'static str,
        /// Why.
        #[source]
        source: kvm_ioctls::Error,
    },
}

/// Maps an I/O error to [`VmmError::Io`] saying `what` failed.
pub(crate) fn io_err(what: &'static str) -> impl FnOnce(std::io::Error) -> VmmError {
    move |source| VmmError::Io { what, source }
}

/// Maps a KVM error to [`VmmError::Kvm`] naming the call `what`.
pub(crate) fn kvm_err(what: &'static str) -> impl FnOnce(kvm_ioctls::Error) -> VmmError {
    move |source| VmmError::Kvm { what, source }
}
