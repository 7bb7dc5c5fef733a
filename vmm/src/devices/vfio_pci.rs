//! VFIO PCI passthrough: a host PCI function in the guest.
//!
//! Config space is the device's, read and written through VFIO, except:
//! the BARs (emulated: the VMM places them in the guest's PCI windows),
//! the expansion ROM (hidden) and the MSI-X capability's control word
//! (emulated: enabling MSI-X enables the vectors through
//! `VFIO_DEVICE_SET_IRQS`). BAR accesses trap to the VMM and go to the
//! device with region reads and writes, except the parts [`mmap_bar`] maps
//! straight into the guest; the MSI-X table and PBA are emulated. Each
//! vector's VFIO eventfd is an irqfd routed (KVM GSI routing) to the
//! message the guest programmed while the vector is unmasked; while it is
//! masked the irqfd is detached, signals accumulate in the eventfd (the
//! pending bit) and are delivered when it is unmasked again.

use std::sync::{Arc, Mutex};

use vfio_bindings::bindings::vfio::{VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_MSIX_IRQ_INDEX};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use viommu_device::guest_error;

use crate::bus::BusDevice;
use crate::pci::msix::{MsiRouter, MsixTable};
use crate::pci::PciDevice;

/// Region access to a VFIO device (a fake in tests).
pub trait VfioRegions: Send + Sync {
    /// Read `buf.len()` bytes at `offset` of region `index`.
    fn read(&self, index: u32, buf: &mut [u8], offset: u64);
    /// Write `buf` at `offset` of region `index`.
    fn write(&self, index: u32, buf: &[u8], offset: u64);
    /// Size of region `index` (0 if absent).
    fn size(&self, index: u32) -> u64;
    /// Enable MSI-X with one eventfd per vector.
    fn enable_msix(&self, fds: &[&EventFd]) -> std::io::Result<()>;
    /// Disable MSI-X.
    fn disable_msix(&self) -> std::io::Result<()>;
}

/// Region accesses are checked and made here (`region`), not with
/// `region_read`/`region_write`, which log every access a region refuses
/// without a limit.
impl VfioRegions for vfio_ioctls::VfioDevice {
    fn read(&self, index: u32, buf: &mut [u8], offset: u64) {
        use std::os::fd::AsRawFd;
        let r = region::Region::of(self, index);
        region::read(self.as_raw_fd(), index, r, buf, offset);
    }
    fn write(&self, index: u32, buf: &[u8], offset: u64) {
        use std::os::fd::AsRawFd;
        let r = region::Region::of(self, index);
        region::write(self.as_raw_fd(), index, r, buf, offset);
    }
    fn size(&self, index: u32) -> u64 {
        self.get_region_size(index)
    }
    fn enable_msix(&self, fds: &[&EventFd]) -> std::io::Result<()> {
        vfio_ioctls::VfioDevice::enable_msix(self, fds.to_vec()).map_err(std::io::Error::other)
    }
    fn disable_msix(&self) -> std::io::Result<()> {
        vfio_ioctls::VfioDevice::disable_msix(self).map_err(std::io::Error::other)
    }
}

const BAR0: usize = 0x10;
const ROM_BAR: usize = 0x30;
const CAP_PTR: usize = 0x34;
const CAP_ID_MSIX: u8 = 0x11;
const MSIX_ENABLE: u16 = 1 << 15;
const MSIX_MASK_ALL: u16 = 1 << 14;

/// A memory BAR of the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BarInfo {
    /// BAR (and VFIO region) index.
    pub index: usize,
    /// Size in bytes.
    pub size: u64,
    /// 64-bit BAR (uses index + 1 for the upper half).
    pub is64: bool,
    /// The low 4 bits of the BAR register (type and prefetchable).
    pub low_bits: u32,
}

/// Where the MSI-X table and PBA live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MsixInfo {
    /// Offset of the capability in config space.
    pub cap: usize,
    /// Number of vectors.
    pub vectors: u16,
    /// BAR and offset of the table.
    pub table: (usize, u64),
    /// BAR and offset of the pending bit array.
    pub pba: (usize, u64),
}

fn cfg_read<R: VfioRegions + ?Sized>(r: &R, off: usize, len: usize) -> u32 {
    let mut b = [0u8; 4];
    r.read(VFIO_PCI_CONFIG_REGION_INDEX, &mut b[..len], off as u64);
    u32::from_le_bytes(b)
}

/// The device's memory BARs (I/O BARs are not passed through).
pub fn probe_bars<R: VfioRegions + ?Sized>(r: &R) -> Vec<BarInfo> {
    let mut bars = Vec::new();
    let mut i = 0;
    while i < 6 {
        let reg = cfg_read(r, BAR0 + 4 * i, 4);
        let size = r.size(i as u32);
        let is_io = reg & 1 == 1;
        let is64 = !is_io && (reg >> 1) & 0x3 == 0x2;
        if size > 0 && !is_io && size.is_power_of_two() {
            bars.push(BarInfo {
                index: i,
                size,
                is64,
                low_bits: reg & 0xf,
            });
        } else if size > 0 {
            tracing::warn!(
                bar = i,
                size,
                "VFIO: I/O or odd-sized BAR not passed through"
            );
        }
        i += if is64 { 2 } else { 1 };
    }
    bars
}

/// One eventfd per MSI-X vector. A drive with many vectors (the table
/// holds up to 2048) can pass the soft open-file limit, 1024 on most
/// hosts: then the soft limit is raised to the hard one, once, and if
/// that is still too low the error names the vectors and the fix.
pub fn vector_eventfds(vectors: u16) -> std::io::Result<Vec<EventFd>> {
    let mut fds = Vec::with_capacity(usize::from(vectors));
    let mut raised = false;
    while fds.len() < usize::from(vectors) {
        match EventFd::new(EFD_NONBLOCK) {
            Ok(fd) => fds.push(fd),
            Err(e) if e.raw_os_error() == Some(libc::EMFILE) && !raised => {
                raised = true;
                raise_open_file_limit()?;
            }
            Err(e) if e.raw_os_error() == Some(libc::EMFILE) => {
                let (soft, _) = open_file_limit()?;
                return Err(std::io::Error::new(
                    e.kind(),
                    format!(
                        "the device has {vectors} MSI-X vectors, one eventfd each, and the open-file limit ({soft}, the hard limit) is reached after {}: raise it (ulimit -n {}, or LimitNOFILE= in a systemd unit) and start again",
                        fds.len(),
                        (soft + u64::from(vectors)).next_power_of_two()
                    ),
                ));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(fds)
}

/// The soft and hard RLIMIT_NOFILE.
fn open_file_limit() -> std::io::Result<(u64, u64)> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit, which we own, and nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((r.rlim_cur, r.rlim_max))
}

/// Raise the soft RLIMIT_NOFILE to the hard one (any process may).
fn raise_open_file_limit() -> std::io::Result<()> {
    let (soft, hard) = open_file_limit()?;
    if soft >= hard {
        return Ok(());
    }
    let r = libc::rlimit {
        rlim_cur: hard,
        rlim_max: hard,
    };
    // SAFETY: setrlimit reads one rlimit, which we own.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    tracing::info!("open-file limit raised from {soft} to {hard} for the MSI-X vectors' eventfds");
    Ok(())
}

/// Find the MSI-X capability.
pub fn probe_msix<R: VfioRegions + ?Sized>(r: &R) -> Option<MsixInfo> {
    let mut p = (cfg_read(r, CAP_PTR, 1) & 0xfc) as usize;
    let mut hops = 0;
    while p != 0 && hops < 48 {
        let head = cfg_read(r, p, 4);
        if head as u8 == CAP_ID_MSIX {
            let table = cfg_read(r, p + 4, 4);
            let pba = cfg_read(r, p + 8, 4);
            return Some(MsixInfo {
                cap: p,
                vectors: ((head >> 16) & 0x7ff) as u16 + 1,
                table: ((table & 7) as usize, u64::from(table & !7)),
                pba: ((pba & 7) as usize, u64::from(pba & !7)),
            });
        }
        p = ((head >> 8) & 0xfc) as usize;
        hops += 1;
    }
    None
}

/// A passed-through PCI function.
pub struct VfioPciDevice {
    dev: Arc<dyn VfioRegions>,
    bars: Vec<BarInfo>,
    /// Emulated BAR registers, by BAR register index.
    bar_regs: [u32; 6],
    msix: Option<MsixInfo>,
    msix_ctrl: u16,
    table: MsixTable,
    router: Arc<dyn MsiRouter>,
    irq_fds: Vec<EventFd>,
    gsis: Vec<u32>,
    attached: Vec<bool>,
    irq_enabled: bool,
    /// Memory Space as the guest wrote it; the BAR slots follow it.
    decode: MemDecode,
    /// Bus mastering turned on before the guest used the virtio-iommu.
    bus_master: BusMasterWatch,
}

impl VfioPciDevice {
    /// Wrap `dev`; its vectors get lines from `router`.
    pub fn new(dev: Arc<dyn VfioRegions>, router: Arc<dyn MsiRouter>) -> std::io::Result<Self> {
        let bars = probe_bars(&*dev);
        let msix = probe_msix(&*dev);
        let vectors = msix.map_or(0, |m| m.vectors);
        let irq_fds = vector_eventfds(vectors)?;
        let gsis = (0..vectors)
            .map(|_| router.allocate())
            .collect::<Result<Vec<_>, _>>()?;
        Ok(VfioPciDevice {
            dev,
            bars,
            bar_regs: [0; 6],
            msix,
            msix_ctrl: 0,
            table: MsixTable::new(vectors),
            router,
            irq_fds,
            gsis,
            attached: vec![false; usize::from(vectors)],
            irq_enabled: false,
            decode: MemDecode::default(),
            bus_master: BusMasterWatch::default(),
        })
    }

    /// The memory BARs to place.
    pub fn bars(&self) -> &[BarInfo] {
        &self.bars
    }

    /// The MSI-X capability, if the device has one.
    pub fn msix_info(&self) -> Option<MsixInfo> {
        self.msix
    }

    /// The memory slots of this function's BARs, removed while the guest
    /// has Memory Space off.
    pub fn set_bar_slots(&mut self, slots: Arc<dyn BarSlots>) {
        self.decode.set_slots(slots);
    }

    /// Say so when the guest turns bus mastering on before it attached
    /// anything to the virtio-iommu this function is behind.
    pub fn watch_bus_master(&mut self, watch: BusMasterWatch) {
        self.bus_master = watch;
    }

    /// Program BAR `index` with guest address `addr`.
    pub fn set_bar_address(&mut self, index: usize, addr: u64) {
        if let Some(b) = self.bars.iter().find(|b| b.index == index) {
            self.bar_regs[index] = (addr as u32 & !0xf) | b.low_bits;
            if b.is64 {
                self.bar_regs[index + 1] = (addr >> 32) as u32;
            }
        }
    }

    fn bar_reg_read(&self, i: usize) -> u32 {
        self.bar_regs[i]
    }

    fn bar_reg_write(&mut self, i: usize, offset: usize, data: &[u8]) {
        // The BAR (or upper half) this register belongs to.
        let owner = self
            .bars
            .iter()
            .find(|b| b.index == i || (b.is64 && b.index + 1 == i))
            .copied();
        let Some(b) = owner else { return };
        let mut v = self.bar_regs[i].to_le_bytes();
        for (k, d) in data.iter().enumerate() {
            if let Some(x) = v.get_mut(offset + k) {
                *x = *d;
            }
        }
        let v = u32::from_le_bytes(v);
        let mask = !(b.size - 1);
        self.bar_regs[i] = if i == b.index {
            (v & mask as u32 & !0xf) | b.low_bits
        } else {
            v & (mask >> 32) as u32
        };
    }

    /// Attach each deliverable vector's irqfd with its current message;
    /// detach the others.
    fn sync_vectors(&mut self) {
        for v in 0..self.irq_fds.len() {
            match self.table.deliverable_message(v) {
                Some((addr, data)) => {
                    if let Err(e) = self.router.route(self.gsis[v], addr, data) {
                        guest_error!(vector = v, "VFIO MSI route: {e}");
                        continue;
                    }
                    if !self.attached[v] {
                        match self.router.attach(&self.irq_fds[v], self.gsis[v]) {
                            Ok(()) => self.attached[v] = true,
                            Err(e) => guest_error!(vector = v, "VFIO irqfd: {e}"),
                        }
                    }
                }
                None if self.attached[v] => {
                    match self.router.detach(&self.irq_fds[v], self.gsis[v]) {
                        Ok(()) => self.attached[v] = false,
                        Err(e) => guest_error!(vector = v, "VFIO irqfd detach: {e}"),
                    }
                }
                None => {}
            }
        }
    }

    /// Whether vector `v` has a signal waiting (only while detached: an
    /// attached irqfd consumes signals at once). Runs on a vCPU thread:
    /// `poll` of one fd with a zero timeout is the only form the vCPU
    /// seccomp filter allows (it neither waits nor consumes the signal).
    fn pending(&self, v: usize) -> bool {
        use std::os::fd::AsRawFd;
        let Some(fd) = self.irq_fds.get(v) else {
            return false;
        };
        if self.attached[v] {
            return false;
        }
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd on an eventfd we own; zero timeout.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        n > 0 && p.revents & libc::POLLIN != 0
    }

    fn read_pba(&self, offset: u64, data: &mut [u8]) {
        for (i, b) in data.iter_mut().enumerate() {
            let base = (offset as usize + i) * 8;
            *b = (0..8)
                .filter(|bit| self.pending(base + bit))
                .fold(0u8, |acc, bit| acc | (1 << bit));
        }
    }

    fn msix_ctrl_write(&mut self, value: u16) {
        self.msix_ctrl = value & (MSIX_ENABLE | MSIX_MASK_ALL);
        let enable = self.msix_ctrl & MSIX_ENABLE != 0;
        if enable && !self.irq_enabled {
            let fds: Vec<&EventFd> = self.irq_fds.iter().collect();
            match self.dev.enable_msix(&fds) {
                Ok(()) => self.irq_enabled = true,
                Err(e) => guest_error!("VFIO: enabling MSI-X failed: {e}"),
            }
        } else if !enable && self.irq_enabled {
            if let Err(e) = self.dev.disable_msix() {
                guest_error!("VFIO: disabling MSI-X failed: {e}");
            }
            self.irq_enabled = false;
        }
        // The table's own pending bits are unused here: the eventfds are.
        let _ = self
            .table
            .set_control(enable, self.msix_ctrl & MSIX_MASK_ALL != 0);
        self.sync_vectors();
    }

    /// Access of `len` bytes at `offset` of BAR `bar` hits the MSI-X table
    /// or PBA: which, and the offset inside it.
    fn msix_target(&self, bar: usize, offset: u64, len: usize) -> Option<(bool, u64)> {
        let m = self.msix?;
        let table_len = u64::from(m.vectors) * 16;
        let pba_len = u64::from(m.vectors).div_ceil(64) * 8;
        let end = offset + len as u64;
        if bar == m.table.0 && offset >= m.table.1 && end <= m.table.1 + table_len {
            return Some((true, offset - m.table.1));
        }
        if bar == m.pba.0 && offset >= m.pba.1 && end <= m.pba.1 + pba_len {
            return Some((false, offset - m.pba.1));
        }
        None
    }

    /// A guest read of BAR `bar`.
    pub fn bar_read(&mut self, bar: usize, offset: u64, data: &mut [u8]) {
        if !self.decode.enabled() {
            return self.decode.refuse_read(bar, offset, data);
        }
        match self.msix_target(bar, offset, data.len()) {
            Some((true, o)) => self.table.read_table(o, data),
            Some((false, o)) => self.read_pba(o, data),
            None => self.dev.read(bar as u32, data, offset),
        }
    }

    /// A guest write of BAR `bar`.
    pub fn bar_write(&mut self, bar: usize, offset: u64, data: &[u8]) {
        if !self.decode.enabled() {
            return self.decode.refuse_write(bar, offset, data.len());
        }
        match self.msix_target(bar, offset, data.len()) {
            Some((true, o)) => {
                let _ = self.table.write_table(o, data);
                self.sync_vectors();
            }
            Some((false, _)) => {}
            None => self.dev.write(bar as u32, data, offset),
        }
    }
}

impl Drop for VfioPciDevice {
    fn drop(&mut self) {
        for v in 0..self.irq_fds.len() {
            if self.attached[v] {
                let _ = self.router.detach(&self.irq_fds[v], self.gsis[v]);
            }
        }
        if self.irq_enabled {
            let _ = self.dev.disable_msix();
        }
    }
}

impl PciDevice for VfioPciDevice {
    fn read_config(&mut self, reg: usize) -> u32 {
        let off = reg * 4;
        if (BAR0..BAR0 + 24).contains(&off) {
            return self.bar_reg_read((off - BAR0) / 4);
        }
        if off == ROM_BAR {
            return 0;
        }
        let mut v = cfg_read(&*self.dev, off, 4);
        if let Some(m) = self.msix {
            if off == m.cap {
                v = (v & !((u32::from(MSIX_ENABLE | MSIX_MASK_ALL)) << 16))
                    | u32::from(self.msix_ctrl) << 16;
            }
        }
        v
    }

    fn write_config(&mut self, reg: usize, offset: usize, data: &[u8]) {
        let off = reg * 4;
        if (BAR0..BAR0 + 24).contains(&off) {
            self.bar_reg_write((off - BAR0) / 4, offset, data);
            return;
        }
        if off == ROM_BAR {
            return;
        }
        if let Some(m) = self.msix {
            if off == m.cap {
                // Bytes 2-3 of the capability are message control.
                let mut ctrl = self.msix_ctrl.to_le_bytes();
                for (k, d) in data.iter().enumerate() {
                    if let Some(i) = (offset + k).checked_sub(2) {
                        if let Some(c) = ctrl.get_mut(i) {
                            *c = *d;
                        }
                    }
                }
                self.msix_ctrl_write(u16::from_le_bytes(ctrl));
                return;
            }
        }
        let at = off + offset;
        self.decode.before_write(at, data);
        self.dev
            .write(VFIO_PCI_CONFIG_REGION_INDEX, data, at as u64);
        self.decode.after_write(at, data);
        self.bus_master.after_write(at, data);
    }
}

/// One BAR of a [`VfioPciDevice`] on the MMIO bus.
pub struct VfioBar {
    /// The device.
    pub dev: Arc<Mutex<VfioPciDevice>>,
    /// Which BAR.
    pub bar: usize,
}

impl BusDevice for VfioBar {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        self.dev
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .bar_read(self.bar, offset, data);
    }
    fn write(&mut self, offset: u64, data: &[u8]) {
        self.dev
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .bar_write(self.bar, offset, data);
    }
}

const HOST_PAGE: u64 = 0x1000;

/// The parts of a BAR of `size` bytes the guest may access directly:
/// the device's mmap-able areas (`sparse`, or the whole BAR) minus the
/// pages holding the MSI-X table or PBA (`holes`), as `(offset, len)`.
pub fn mappable_ranges(
    size: u64,
    holes: &[(u64, u64)],
    sparse: Option<&[(u64, u64)]>,
) -> Vec<(u64, u64)> {
    let whole = [(0, size)];
    let areas = sparse.unwrap_or(&whole);
    let mut holes: Vec<(u64, u64)> = holes
        .iter()
        .map(|&(o, l)| {
            let start = o & !(HOST_PAGE - 1);
            (start, (o + l).next_multiple_of(HOST_PAGE))
        })
        .collect();
    holes.sort_unstable();
    let mut out = Vec::new();
    for &(a_off, a_len) in areas {
        // Page-align the area inwards; clip to the BAR.
        let mut start = a_off.next_multiple_of(HOST_PAGE);
        let end = (a_off + a_len).min(size) & !(HOST_PAGE - 1);
        for &(h0, h1) in &holes {
            if h1 <= start || h0 >= end {
                continue;
            }
            if h0 > start {
                out.push((start, h0 - start));
            }
            start = start.max(h1);
        }
        if end > start {
            out.push((start, end - start));
        }
    }
    out
}

/// A piece of a device BAR mmap-ed into this process, to be given to
/// the guest as a KVM memory slot. Unmapped on drop.
#[derive(Debug)]
pub struct BarMmap {
    /// Guest-physical address.
    pub gpa: u64,
    /// Length.
    pub len: u64,
    /// Host address.
    pub host: *mut libc::c_void,
}

// SAFETY: the mapping is device memory owned by this value; it is only
// handed to KVM and unmapped once, on drop. Moving it between threads is fine.
unsafe impl Send for BarMmap {}
// SAFETY: shared references give no access to the memory.
unsafe impl Sync for BarMmap {}

impl Drop for BarMmap {
    fn drop(&mut self) {
        // SAFETY: `host` and `len` are exactly what mmap returned/was given.
        unsafe { libc::munmap(self.host, self.len as usize) };
    }
}

/// mmap the directly accessible parts of `bar` (placed at `gpa`) of a
/// VFIO device: everything mmap-able except the MSI-X table and PBA pages.
pub fn mmap_bar(
    dev: &vfio_ioctls::VfioDevice,
    bar: &BarInfo,
    gpa: u64,
    msix: Option<MsixInfo>,
) -> std::io::Result<Vec<BarMmap>> {
    use std::os::fd::AsRawFd;
    use vfio_bindings::bindings::vfio::VFIO_REGION_INFO_FLAG_MMAP;
    let index = bar.index as u32;
    if dev.get_region_flags(index) & VFIO_REGION_INFO_FLAG_MMAP == 0 {
        return Ok(Vec::new());
    }
    let sparse: Option<Vec<(u64, u64)>> = dev.get_region_caps(index).iter().find_map(|c| match c {
        vfio_ioctls::VfioRegionInfoCap::SparseMmap(s) => {
            Some(s.areas.iter().map(|a| (a.offset, a.size)).collect())
        }
        _ => None,
    });
    let mut holes = Vec::new();
    if let Some(m) = msix {
        let table_len = u64::from(m.vectors) * 16;
        let pba_len = u64::from(m.vectors).div_ceil(64) * 8;
        if m.table.0 == bar.index {
            holes.push((m.table.1, table_len));
        }
        if m.pba.0 == bar.index {
            holes.push((m.pba.1, pba_len));
        }
    }
    let region_offset = dev.get_region_offset(index);
    let mut maps = Vec::new();
    for (off, len) in mappable_ranges(bar.size, &holes, sparse.as_deref()) {
        // SAFETY: a fresh shared mapping of the device fd at the region's
        // mmap offset; the kernel validates offset and length. No existing
        // memory is replaced (no MAP_FIXED).
        let host = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                dev.as_raw_fd(),
                (region_offset + off) as libc::off_t,
            )
        };
        if host == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        maps.push(BarMmap {
            gpa: gpa + off,
            len,
            host,
        });
    }
    Ok(maps)
}

/// The MSI-X interrupt index, for reference in logs.
pub const MSIX_IRQ_INDEX: u32 = VFIO_PCI_MSIX_IRQ_INDEX;

mod bar_decode;
mod bus_master;
mod region;
mod reset;
pub use bar_decode::{BarSlots, MemDecode};
pub use bus_master::{Attachments, BusMasterWatch, ViommuAttachments};
#[cfg(test)]
mod tests;
