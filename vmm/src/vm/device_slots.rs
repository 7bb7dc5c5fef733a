//! Device memory slots (VFIO BARs) that a guest can switch off and on:
//! removed while it has the function's Memory Space off, put back after
//! (see `devices/vfio_pci/bar_decode.rs`).

use std::sync::{Arc, Mutex};

use kvm_bindings::kvm_userspace_memory_region;
use kvm_ioctls::VmFd;

use super::Vm;
use crate::devices::vfio_pci::{BarMmap, BarSlots};

/// Device memory given to the guest: its slot, and whether the slot is in
/// the guest's memory map now.
pub(super) struct DeviceMap {
    slot: u32,
    map: BarMmap,
    present: bool,
}

impl DeviceMap {
    pub(super) fn new(slot: u32, map: BarMmap) -> Self {
        DeviceMap {
            slot,
            map,
            present: true,
        }
    }

    /// The slot and its mapping if the slot is in KVM (the release removes
    /// those only); `None`, dropping the mapping, if the guest took it out.
    pub(super) fn present(self) -> Option<(u32, BarMmap)> {
        self.present.then_some((self.slot, self.map))
    }
}

/// Some of the VM's device slots (one function's BARs), removed and put
/// back as a unit. Holds the VM fd: dropped before the VM, as the devices are.
pub struct KvmBarSlots {
    fd: Arc<VmFd>,
    maps: Arc<Mutex<Vec<DeviceMap>>>,
    slots: Vec<u32>,
}

impl Vm {
    /// The device slots `slots` (numbers [`Vm::add_device_memory`]
    /// returned), to take out of the guest's memory map and put back.
    pub fn bar_slots(&self, slots: Vec<u32>) -> KvmBarSlots {
        KvmBarSlots {
            fd: self.fd.clone(),
            maps: self.device_maps.clone(),
            slots,
        }
    }
}

impl BarSlots for KvmBarSlots {
    fn set_present(&self, present: bool) -> std::io::Result<()> {
        let mut maps = self.maps.lock().unwrap_or_else(|e| e.into_inner());
        let mut result = Ok(());
        for m in maps.iter_mut() {
            if !self.slots.contains(&m.slot) || m.present == present {
                continue;
            }
            let r = kvm_userspace_memory_region {
                slot: m.slot,
                flags: 0,
                guest_phys_addr: m.map.gpa,
                memory_size: if present { m.map.len } else { 0 },
                userspace_addr: m.map.host as u64,
            };
            // SAFETY: `m.map` is a live mapping of `m.map.len` bytes; it
            // stays in the VM's device maps (unmapped only after the
            // release has taken it out of this list, and its slot out of
            // KVM). Size 0 deletes the slot; KVM stops using the mapping
            // before the call returns.
            match unsafe { self.fd.set_user_memory_region(r) } {
                Ok(()) => m.present = present,
                Err(e) => result = Err(std::io::Error::from_raw_os_error(e.errno())),
            }
        }
        result
    }
}
