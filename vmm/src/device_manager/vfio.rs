//! VFIO PCI passthrough: plugging a `--vfio` device, one step a function.
//!
//! Per device, in this order: the KVM-VFIO device (once per VM), a
//! container (or, with the iommufd backend, an iommufd and an IOAS), the
//! device (its group joins the container, or its cdev is bound to the
//! iommufd and attached to the IOAS), a reset, the DMA mapper of the
//! container or IOAS, the emulated PCI function, BAR placement, the BARs'
//! mmaps as KVM memory slots, a slot on the root bus, and the BARs on the
//! MMIO bus (the parts that are not mmap-ed trap there).

use std::sync::{Arc, Mutex};

use dma_mapper::{HostIommuMapper, IommufdMapper, PinnedRamIoas, PinnedRamMapper, VfioMapper};
use iommufd_ioctls::IommuFd;
use vfio_ioctls::{VfioContainer, VfioDevice, VfioDeviceFd, VfioIommufd, VfioOps};

use super::{DeviceManager, Endpoint};
use crate::bus::Bus;
use crate::cli::{VfioBackend, VfioDeviceSpec};
use crate::devices::vfio_pci::{mmap_bar, BarInfo, BusMasterWatch, VfioBar, VfioPciDevice};
use crate::error::{io_err, kvm_err, VmmError};
use crate::pci::alloc::BarWindows;
use crate::pci::Bdf;
use crate::vm::Vm;

/// A BAR placed in the guest's PCI windows.
#[derive(Debug, Clone, Copy)]
struct PlacedBar {
    info: BarInfo,
    /// Guest-physical address.
    gpa: u64,
}

impl DeviceManager<'_> {
    /// Pass `specs` through, in order; each becomes an endpoint.
    /// With `pin_guest_ram`, iommufd maps are copies from guest RAM pinned
    /// once per device.
    pub(super) fn add_vfio_devices(
        &mut self,
        specs: &[VfioDeviceSpec],
        pin_guest_ram: bool,
    ) -> Result<(), VmmError> {
        for spec in specs {
            let endpoint = self.add_vfio_device(spec, pin_guest_ram)?;
            self.endpoints.push(endpoint);
        }
        Ok(())
    }

    /// Pass one device through; returns its guest BDF and mapper.
    fn add_vfio_device(
        &mut self,
        spec: &VfioDeviceSpec,
        pin_guest_ram: bool,
    ) -> Result<Endpoint, VmmError> {
        let kvm_vfio = self.kvm_vfio()?;
        tracing::info!(
            device = %spec.bdf,
            backend = spec.backend.name(),
            why = %spec.backend_why,
            "VFIO DMA backend"
        );
        let (device, mapper): (_, Arc<dyn HostIommuMapper>) = match spec.backend {
            VfioBackend::Container => on_container(spec, kvm_vfio, self.vm)?,
            VfioBackend::Iommufd => {
                match on_iommufd(spec, kvm_vfio.clone(), pin_guest_ram, self.vm) {
                    Ok(opened) => opened,
                    // `auto` chose iommufd, the host refused it (seen: EPERM
                    // from the bind on a host without interrupt remapping,
                    // where only vfio_iommu_type1.allow_unsafe_interrupts was
                    // set): the container, as before iommufd existed.
                    Err(e) if spec.container_fallback && !pin_guest_ram => {
                        tracing::warn!(
                            device = %spec.bdf,
                            "--vfio-backend auto: iommufd refused the device ({e}); using the type1 container"
                        );
                        on_container(spec, kvm_vfio, self.vm)?
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        reset_before_use(&device, spec);
        self.vfio.push(device.clone());
        let mut dev = VfioPciDevice::new(device.clone(), self.router.clone())
            .map_err(io_err("cannot set up the VFIO device's interrupts"))?;
        if let Some(a) = &self.attachments {
            dev.watch_bus_master(BusMasterWatch::new(spec.bdf.to_string(), a.clone()));
        }
        let bars = place_bars(&mut self.bars, &mut dev)?;
        map_bars_into_guest(self.vm, &device, &mut dev, &bars)?;
        let dev = Arc::new(Mutex::new(dev));
        let slot = self.root.add_device(dev.clone())?;
        insert_bars(&self.mmio, &dev, &bars)?;
        self.vfio_pci.push(dev.clone());
        tracing::info!(device = %spec.bdf, slot, "VFIO device passed through");
        Ok(Endpoint {
            bdf: Bdf::slot(slot),
            counted: Arc::new(dma_mapper::RecordingMapper::new(mapper.clone())),
            mapper,
        })
    }

    /// The VM's KVM-VFIO device, created on first use: it tells KVM which
    /// VFIO groups the VM uses.
    fn kvm_vfio(&mut self) -> Result<Arc<VfioDeviceFd>, VmmError> {
        if let Some(d) = &self.kvm_vfio {
            return Ok(d.clone());
        }
        let mut create = kvm_bindings::kvm_create_device {
            type_: kvm_bindings::kvm_device_type_KVM_DEV_TYPE_VFIO,
            fd: 0,
            flags: 0,
        };
        let fd = self
            .vm
            .fd()
            .create_device(&mut create)
            .map_err(kvm_err("KVM_CREATE_DEVICE (VFIO)"))?;
        let d = Arc::new(VfioDeviceFd::new_from_kvm(fd));
        self.kvm_vfio = Some(d.clone());
        Ok(d)
    }
}

/// The error for a failed VFIO or iommufd call on `spec`'s device: `what`
/// failed, and the fix.
fn vfio_err<E: std::error::Error + Send + Sync + 'static>(
    spec: &VfioDeviceSpec,
    what: &'static str,
) -> impl FnOnce(E) -> VmmError {
    let path = spec.sysfs.display().to_string();
    move |e| VmmError::Vfio {
        path,
        what,
        source: Box::new(e),
    }
}

/// The device opened through its group in a new type1 container, and the
/// mapper that programs the container.
fn on_container(
    spec: &VfioDeviceSpec,
    kvm_vfio: Arc<VfioDeviceFd>,
    vm: &Vm,
) -> Result<(Arc<VfioDevice>, Arc<dyn HostIommuMapper>), VmmError> {
    let container = open_container(spec, kvm_vfio)?;
    let device = Arc::new(open_device(spec, &container)?);
    Ok((device, Arc::new(dma_mapper(container, vm))))
}

/// The device opened through its cdev on a new iommufd IOAS, and the
/// mapper that programs the IOAS (with `pin_guest_ram`: copies from guest
/// RAM pinned once).
fn on_iommufd(
    spec: &VfioDeviceSpec,
    kvm_vfio: Arc<VfioDeviceFd>,
    pin_guest_ram: bool,
    vm: &Vm,
) -> Result<(Arc<VfioDevice>, Arc<dyn HostIommuMapper>), VmmError> {
    let ioas = open_iommufd(spec, kvm_vfio)?;
    let device = Arc::new(open_cdev(spec, &ioas)?);
    let mapper: Arc<dyn HostIommuMapper> = if pin_guest_ram {
        Arc::new(pinned_ram_mapper(spec, ioas, vm)?)
    } else {
        Arc::new(iommufd_mapper(ioas, vm))
    };
    Ok((device, mapper))
}

/// A new VFIO container (one per device), known to the VM's KVM-VFIO device.
fn open_container(
    spec: &VfioDeviceSpec,
    kvm_vfio: Arc<VfioDeviceFd>,
) -> Result<Arc<VfioContainer>, VmmError> {
    VfioContainer::new(Some(kvm_vfio))
        .map(Arc::new)
        .map_err(vfio_err(
            spec,
            "cannot open /dev/vfio/vfio (load vfio_iommu_type1)",
        ))
}

/// Open the device; its IOMMU group joins `container`.
fn open_device(
    spec: &VfioDeviceSpec,
    container: &Arc<VfioContainer>,
) -> Result<VfioDevice, VmmError> {
    VfioDevice::new(&spec.sysfs, container.clone() as Arc<dyn VfioOps>, false).map_err(vfio_err(
        spec,
        "cannot open the device (is its whole IOMMU group bound to vfio-pci?)",
    ))
}

/// A new iommufd with one IOAS (one per device, as one container per
/// device), known to the VM's KVM-VFIO device.
fn open_iommufd(
    spec: &VfioDeviceSpec,
    kvm_vfio: Arc<VfioDeviceFd>,
) -> Result<Arc<VfioIommufd>, VmmError> {
    let iommufd = IommuFd::new().map(Arc::new).map_err(vfio_err(
        spec,
        "cannot open /dev/iommu (modprobe iommufd, or --vfio-backend container)",
    ))?;
    VfioIommufd::new(iommufd, None, Some(kvm_vfio))
        .map(Arc::new)
        .map_err(vfio_err(
            spec,
            "cannot allocate an iommufd IO address space",
        ))
}

/// Open the device through its VFIO cdev, bind it to the iommufd of
/// `ioas` and attach it to the IOAS.
fn open_cdev(spec: &VfioDeviceSpec, ioas: &Arc<VfioIommufd>) -> Result<VfioDevice, VmmError> {
    VfioDevice::new(&spec.sysfs, ioas.clone() as Arc<dyn VfioOps>, true).map_err(vfio_err(
        spec,
        "cannot open the device's VFIO cdev and attach it to the IOAS (is it bound to vfio-pci and not in use? EPERM: the host has no interrupt remapping, and iommufd takes such a device only with iommufd.allow_unsafe_interrupts=1, unsafe on a shared host; or --vfio-backend container)",
    ))
}

/// Start from a clean device, whatever its previous user left in it
/// (VFIO_DEVICE_RESET, where the device supports one; on close vfio-pci
/// resets the function itself).
fn reset_before_use(device: &VfioDevice, spec: &VfioDeviceSpec) {
    device.reset();
    tracing::debug!(device = %spec.bdf, "VFIO device reset before use");
}

/// The DMA mapper that programs `container` with guest RAM.
fn dma_mapper(container: Arc<VfioContainer>, vm: &Vm) -> VfioMapper {
    // SAFETY: guest memory is only accessed through vm-memory's volatile
    // accessors and KVM; no Rust reference to it exists.
    unsafe { VfioMapper::new(container, vm.memory().clone()) }
}

/// The DMA mapper that programs the IOAS of `ioas` with guest RAM.
fn iommufd_mapper(ioas: Arc<VfioIommufd>, vm: &Vm) -> IommufdMapper {
    // SAFETY: as in `dma_mapper`: guest memory is only accessed through
    // vm-memory's volatile accessors and KVM.
    unsafe { IommufdMapper::new(ioas, vm.memory().clone()) }
}

/// The DMA mapper that programs the IOAS of `ioas` with copies from all
/// guest RAM, pinned here once.
fn pinned_ram_mapper(
    spec: &VfioDeviceSpec,
    ioas: Arc<VfioIommufd>,
    vm: &Vm,
) -> Result<PinnedRamMapper, VmmError> {
    // SAFETY: guest memory stays mapped for the VM's life (the Vm outlives
    // the device manager) and is only accessed through vm-memory's
    // volatile accessors and KVM.
    let pinned = unsafe { PinnedRamIoas::new(ioas, vm.memory()) }.map_err(vfio_err(
        spec,
        "cannot pin guest RAM in an iommufd IO address space (RLIMIT_MEMLOCK? or drop --pin-guest-ram)",
    ))?;
    tracing::info!(
        device = %spec.bdf,
        bytes = pinned.pinned_bytes(),
        "guest RAM pinned once; guest MAPs are IOMMU_IOAS_COPYs from it"
    );
    // SAFETY: as in `dma_mapper`.
    Ok(unsafe { PinnedRamMapper::new(Arc::new(pinned), vm.memory().clone()) })
}

/// Give each memory BAR of `dev` a guest address and program it into the
/// emulated BAR register.
fn place_bars(bars: &mut BarWindows, dev: &mut VfioPciDevice) -> Result<Vec<PlacedBar>, VmmError> {
    let infos: Vec<BarInfo> = dev.bars().to_vec();
    let mut placed = Vec::new();
    for info in infos {
        let gpa = bars.allocate(info.size, info.is64)?;
        dev.set_bar_address(info.index, gpa);
        placed.push(PlacedBar { info, gpa });
    }
    Ok(placed)
}

/// Direct guest access to all of each BAR but the MSI-X pages (which trap
/// and are emulated): mmap them and make them KVM memory slots, which
/// follow the guest's Memory Space bit.
fn map_bars_into_guest(
    vm: &Vm,
    device: &VfioDevice,
    dev: &mut VfioPciDevice,
    bars: &[PlacedBar],
) -> Result<(), VmmError> {
    let mut slots = Vec::new();
    for b in bars {
        let maps = mmap_bar(device, &b.info, b.gpa, dev.msix_info())
            .map_err(io_err("cannot mmap a VFIO BAR"))?;
        for m in maps {
            tracing::debug!(
                bar = b.info.index,
                gpa = m.gpa,
                len = m.len,
                "BAR mapped into the guest"
            );
            slots.push(vm.add_device_memory(m)?);
        }
    }
    dev.set_bar_slots(Arc::new(vm.bar_slots(slots)));
    Ok(())
}

/// Put each BAR of `dev` on the MMIO bus at its guest address.
fn insert_bars(
    mmio: &Bus,
    dev: &Arc<Mutex<VfioPciDevice>>,
    bars: &[PlacedBar],
) -> Result<(), VmmError> {
    for b in bars {
        let bar = VfioBar {
            dev: dev.clone(),
            bar: b.info.index,
        };
        mmio.insert(Arc::new(Mutex::new(bar)), b.gpa, b.info.size)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
