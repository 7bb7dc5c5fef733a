//! The KVM VM: guest memory, in-kernel irqchip, memory slots.

use std::sync::Arc;

use kvm_bindings::{
    kvm_irq_routing_entry, kvm_irq_routing_entry__bindgen_ty_1, kvm_irq_routing_irqchip,
    kvm_irq_routing_msi, kvm_msi, kvm_userspace_memory_region, KvmIrqRouting, KVM_IRQCHIP_IOAPIC,
    KVM_IRQCHIP_PIC_MASTER, KVM_IRQCHIP_PIC_SLAVE, KVM_IRQ_ROUTING_IRQCHIP, KVM_IRQ_ROUTING_MSI,
};
use kvm_ioctls::{Cap, Kvm, VmFd};
use vm_memory::mmap::MmapRegionBuilder;
use vm_memory::{Address, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion, GuestRegionMmap};

use crate::layout::ram_regions;
use crate::pci::msix::{MsiRouter, MsiSender};

/// Where KVM keeps the real-mode TSS (3 pages) and the identity map page:
/// in the 32-bit hole, clear of every window in [`crate::layout`].
const KVM_TSS_ADDRESS: usize = 0xfffb_d000;
const KVM_IDENTITY_MAP_ADDRESS: u64 = 0xfffb_c000;

/// Why the VM could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum VmError {
    /// /dev/kvm is missing or unusable.
    #[error("cannot open /dev/kvm ({0}): load kvm_intel or kvm_amd and check you may read/write /dev/kvm")]
    OpenKvm(#[source] kvm_ioctls::Error),
    /// The host KVM lacks something we need.
    #[error("host KVM lacks capability {0:?}")]
    MissingCap(Cap),
    /// A KVM ioctl failed.
    #[error("KVM {what} failed")]
    Kvm {
        /// Which call.
        what: &'static str,
        /// The error.
        #[source]
        source: kvm_ioctls::Error,
    },
    /// Guest RAM could not be mapped.
    #[error("cannot map {size} MiB of guest RAM{hint}")]
    Memory {
        /// MiB asked.
        size: u64,
        /// Advice.
        hint: String,
        /// The error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Map `mem_size` bytes of guest RAM around the 32-bit hole, from anonymous
/// memory or 2 MiB huge pages.
pub fn create_guest_memory(mem_size: u64, hugepages: bool) -> Result<GuestMemoryMmap, VmError> {
    let mib = mem_size >> 20;
    let err = |hint: String, source: Box<dyn std::error::Error + Send + Sync>| VmError::Memory {
        size: mib,
        hint,
        source,
    };
    let ranges = ram_regions(mem_size);
    if !hugepages {
        let ranges: Vec<_> = ranges.iter().map(|&(a, s)| (a, s as usize)).collect();
        let mem =
            GuestMemoryMmap::from_ranges(&ranges).map_err(|e| err(String::new(), e.into()))?;
        advise_huge_pages(&mem);
        return Ok(mem);
    }
    let mut regions = Vec::new();
    for (addr, size) in ranges {
        // No MAP_NORESERVE: with too few huge pages mmap fails now instead
        // of the guest taking SIGBUS later.
        let mmap = MmapRegionBuilder::new(size as usize)
            .with_mmap_prot(libc::PROT_READ | libc::PROT_WRITE)
            .with_mmap_flags(libc::MAP_ANONYMOUS | libc::MAP_PRIVATE | libc::MAP_HUGETLB)
            .with_hugetlbfs(true)
            .build()
            .map_err(|e| {
                err(
                    format!(
                        " from huge pages; reserve them first: echo {} > /proc/sys/vm/nr_hugepages",
                        mem_size.div_ceil(2 << 20)
                    ),
                    e.into(),
                )
            })?;
        let region = GuestRegionMmap::new(mmap, addr)
            .ok_or_else(|| err(String::new(), "region wraps the address space".into()))?;
        regions.push(region);
    }
    GuestMemoryMmap::from_regions(regions).map_err(|e| err(String::new(), e.into()))
}

/// Ask for transparent huge pages behind guest RAM (`MADV_HUGEPAGE`), as
/// QEMU and cloud-hypervisor do: 2 MiB host pages mean 2 MiB nested page
/// table entries, fewer nested page faults and TLB misses for the guest.
/// A kernel without THP refuses; the RAM then stays on small pages.
fn advise_huge_pages(mem: &GuestMemoryMmap) {
    for r in mem.iter() {
        let size = r.len() as usize;
        // SAFETY: the range is a live anonymous mapping this process owns
        // (the region's); madvise(MADV_HUGEPAGE) changes no contents.
        let rc = unsafe { libc::madvise(r.as_ptr().cast(), size, libc::MADV_HUGEPAGE) };
        if rc != 0 {
            tracing::debug!(
                size,
                "madvise(MADV_HUGEPAGE) on guest RAM: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}

/// A KVM VM with its memory registered and an in-kernel irqchip.
pub struct Vm {
    // Field order matters: the VM fd is dropped before the memory it maps.
    fd: Arc<VmFd>,
    kvm: Kvm,
    mem: GuestMemoryMmap,
    /// Device memory given to the guest as memory slots (VFIO BARs), with
    /// their slot numbers.
    device_maps: Arc<std::sync::Mutex<Vec<device_slots::DeviceMap>>>,
    next_slot: std::sync::atomic::AtomicU32,
}

impl Vm {
    /// Create the VM and register `mem` with it.
    pub fn new(mem: GuestMemoryMmap) -> Result<Self, VmError> {
        let kvm = Kvm::new().map_err(VmError::OpenKvm)?;
        for cap in [
            Cap::Irqchip,
            Cap::UserMemory,
            Cap::Irqfd,
            Cap::SetTssAddr,
            Cap::ExtCpuid,
            Cap::SignalMsi,
        ] {
            if !kvm.check_extension(cap) {
                return Err(VmError::MissingCap(cap));
            }
        }
        let kvm_err = |what| move |source| VmError::Kvm { what, source };
        let fd = kvm.create_vm().map_err(kvm_err("KVM_CREATE_VM"))?;
        fd.set_tss_address(KVM_TSS_ADDRESS)
            .map_err(kvm_err("KVM_SET_TSS_ADDR"))?;
        fd.set_identity_map_address(KVM_IDENTITY_MAP_ADDRESS)
            .map_err(kvm_err("KVM_SET_IDENTITY_MAP_ADDR"))?;
        fd.create_irq_chip()
            .map_err(kvm_err("KVM_CREATE_IRQCHIP"))?;
        for (slot, region) in mem.iter().enumerate() {
            let host = region
                .get_host_address(vm_memory::MemoryRegionAddress(0))
                .map_err(|e| VmError::Memory {
                    size: region.len() >> 20,
                    hint: String::new(),
                    source: e.into(),
                })?;
            let r = kvm_userspace_memory_region {
                slot: slot as u32,
                flags: 0,
                guest_phys_addr: region.start_addr().raw_value(),
                memory_size: region.len(),
                userspace_addr: host as u64,
            };
            // SAFETY: `host` is the start of a live mmap of `region.len()`
            // bytes that `self.mem` keeps mapped for as long as the VM fd
            // lives (the fd is dropped first, see the field order).
            unsafe { fd.set_user_memory_region(r) }
                .map_err(kvm_err("KVM_SET_USER_MEMORY_REGION"))?;
        }
        let next_slot = std::sync::atomic::AtomicU32::new(mem.num_regions() as u32);
        Ok(Vm {
            fd: Arc::new(fd),
            kvm,
            mem,
            device_maps: Arc::default(),
            next_slot,
        })
    }

    /// Give the guest direct access to device memory: `map` becomes a
    /// memory slot at its guest address, and lives as long as the VM.
    /// Returns the slot's number.
    pub fn add_device_memory(
        &self,
        map: crate::devices::vfio_pci::BarMmap,
    ) -> Result<u32, VmError> {
        let slot = self
            .next_slot
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let r = kvm_userspace_memory_region {
            slot,
            flags: 0,
            guest_phys_addr: map.gpa,
            memory_size: map.len,
            userspace_addr: map.host as u64,
        };
        // SAFETY: `map` is a live mapping of `map.len` bytes; it is kept in
        // `self.device_maps`, dropped only after the VM fd (field order).
        unsafe { self.fd.set_user_memory_region(r) }.map_err(|source| VmError::Kvm {
            what: "KVM_SET_USER_MEMORY_REGION (device memory)",
            source,
        })?;
        self.device_maps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(device_slots::DeviceMap::new(slot, map));
        Ok(slot)
    }

    /// Take the device memory away from the guest and unmap it from this
    /// process (the guest must be stopped). An mmap of a VFIO BAR holds the
    /// device file open, so this must happen before the device is closed:
    /// otherwise the group cannot leave its container
    /// (`VFIO_GROUP_UNSET_CONTAINER`: EBUSY).
    pub fn release_device_memory(&self) {
        let maps = std::mem::take(&mut *self.device_maps.lock().unwrap_or_else(|e| e.into_inner()));
        for (slot, map) in maps
            .into_iter()
            .filter_map(device_slots::DeviceMap::present)
        {
            let r = kvm_userspace_memory_region {
                slot,
                flags: 0,
                guest_phys_addr: map.gpa,
                memory_size: 0,
                userspace_addr: map.host as u64,
            };
            // SAFETY: a zero-sized region deletes the slot; KVM stops using
            // the mapping before the call returns, so unmapping it after is
            // sound.
            if let Err(e) = unsafe { self.fd.set_user_memory_region(r) } {
                tracing::warn!(
                    slot,
                    gpa = map.gpa,
                    "removing a device memory slot failed: {e}"
                );
            }
            drop(map);
        }
    }

    /// The VM fd.
    pub fn fd(&self) -> &Arc<VmFd> {
        &self.fd
    }

    /// The KVM system fd.
    pub fn kvm(&self) -> &Kvm {
        &self.kvm
    }

    /// Guest memory.
    pub fn memory(&self) -> &GuestMemoryMmap {
        &self.mem
    }
}

/// Delivers MSI messages with `KVM_SIGNAL_MSI`.
pub struct KvmMsiSender(pub Arc<VmFd>);

impl MsiSender for KvmMsiSender {
    fn send(&self, address: u64, data: u32) -> std::io::Result<()> {
        let msi = kvm_msi {
            address_lo: address as u32,
            address_hi: (address >> 32) as u32,
            data,
            ..Default::default()
        };
        self.0
            .signal_msi(msi)
            .map(|_| ())
            .map_err(|e| std::io::Error::from_raw_os_error(e.errno()))
    }
}

/// Number of IOAPIC pins; MSI lines are allocated above them.
pub const IOAPIC_PINS: u32 = 24;

fn irqchip_entry(gsi: u32, irqchip: u32, pin: u32) -> kvm_irq_routing_entry {
    kvm_irq_routing_entry {
        gsi,
        type_: KVM_IRQ_ROUTING_IRQCHIP,
        flags: 0,
        pad: 0,
        u: kvm_irq_routing_entry__bindgen_ty_1 {
            irqchip: kvm_irq_routing_irqchip { irqchip, pin },
        },
    }
}

fn msi_entry(gsi: u32, address: u64, data: u32) -> kvm_irq_routing_entry {
    kvm_irq_routing_entry {
        gsi,
        type_: KVM_IRQ_ROUTING_MSI,
        flags: 0,
        pad: 0,
        u: kvm_irq_routing_entry__bindgen_ty_1 {
            msi: kvm_irq_routing_msi {
                address_lo: address as u32,
                address_hi: (address >> 32) as u32,
                data,
                ..Default::default()
            },
        },
    }
}

/// The full routing table: KVM's default legacy routes (GSI 0-15 to the
/// PICs and the IOAPIC, 16-23 to the IOAPIC), which `KVM_SET_GSI_ROUTING`
/// would otherwise drop, plus the MSI routes.
pub fn routing_entries(
    msi: &std::collections::BTreeMap<u32, (u64, u32)>,
) -> Vec<kvm_irq_routing_entry> {
    let mut v = Vec::new();
    for gsi in 0..IOAPIC_PINS {
        if gsi < 16 {
            let (chip, pin) = if gsi < 8 {
                (KVM_IRQCHIP_PIC_MASTER, gsi)
            } else {
                (KVM_IRQCHIP_PIC_SLAVE, gsi - 8)
            };
            v.push(irqchip_entry(gsi, chip, pin));
        }
        v.push(irqchip_entry(gsi, KVM_IRQCHIP_IOAPIC, gsi));
    }
    v.extend(msi.iter().map(|(&gsi, &(a, d))| msi_entry(gsi, a, d)));
    v
}

/// MSI routes by GSI: (address, data).
pub type MsiRoutes = std::collections::BTreeMap<u32, (u64, u32)>;

/// Set GSI `gsi`'s MSI route to `msg` in `routes` and hand the whole table
/// to `install` (KVM takes only whole tables); unchanged routes install
/// nothing. If `install` fails the route is put back as it was: a route
/// kept that KVM never took would make the next identical request a no-op
/// that reports success, and the vector's irqfd would then signal a GSI
/// with no route (its interrupts lost, the guest's driver timing out).
pub fn update_route(
    routes: &mut MsiRoutes,
    gsi: u32,
    msg: (u64, u32),
    install: impl FnOnce(&MsiRoutes) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let old = routes.insert(gsi, msg);
    if old == Some(msg) {
        return Ok(());
    }
    install(routes).inspect_err(|_| match old {
        Some(m) => {
            routes.insert(gsi, m);
        }
        None => {
            routes.remove(&gsi);
        }
    })
}

/// MSI routing through KVM's GSI table and irqfds.
pub struct KvmMsiRouter {
    fd: Arc<VmFd>,
    /// Next free GSI, and the MSI routes.
    state: std::sync::Mutex<(u32, MsiRoutes)>,
}

impl KvmMsiRouter {
    /// A router for the VM `fd`.
    pub fn new(fd: Arc<VmFd>) -> Self {
        KvmMsiRouter {
            fd,
            state: std::sync::Mutex::new((IOAPIC_PINS, Default::default())),
        }
    }
}

fn kvm_io(e: kvm_ioctls::Error) -> std::io::Error {
    std::io::Error::from_raw_os_error(e.errno())
}

impl MsiRouter for KvmMsiRouter {
    fn allocate(&self) -> std::io::Result<u32> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let gsi = s.0;
        if gsi >= kvm_bindings::KVM_MAX_IRQ_ROUTES as u32 {
            return Err(std::io::Error::other("out of KVM GSIs"));
        }
        s.0 += 1;
        Ok(gsi)
    }

    fn route(&self, gsi: u32, address: u64, data: u32) -> std::io::Result<()> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        update_route(&mut s.1, gsi, (address, data), |routes| {
            let table = KvmIrqRouting::from_entries(&routing_entries(routes)).map_err(|e| {
                std::io::Error::other(format!(
                    "{} GSI routes do not fit KVM's table ({e:?})",
                    routes.len()
                ))
            })?;
            self.fd.set_gsi_routing(&table).map_err(kvm_io)
        })
    }

    fn attach(&self, fd: &vmm_sys_util::eventfd::EventFd, gsi: u32) -> std::io::Result<()> {
        self.fd.register_irqfd(fd, gsi).map_err(kvm_io)
    }

    fn detach(&self, fd: &vmm_sys_util::eventfd::EventFd, gsi: u32) -> std::io::Result<()> {
        self.fd.unregister_irqfd(fd, gsi).map_err(kvm_io)
    }
}

mod device_slots;
pub use device_slots::KvmBarSlots;
#[cfg(test)]
mod tests;
