//! The device's parameters: [`DeviceConfig`], its config space, and the
//! [`ConfigBuilder`] that derives it from what the host offers (the IOVA
//! ranges and page sizes of the endpoints' IOMMUs, the pool options).

use tracing::{debug, info, warn};
use viommu_wire as wire;
use vm_memory::{ByteValued, GuestAddressSpace};

use crate::guest_warn;
use crate::{Error, VirtioIommu, VIRTIO_IOMMU_F_BYPASS_CONFIG};

/// The x86 MSI doorbell window (0xfee00000-0xfeefffff), the default
/// [`DeviceConfig::msi_window`].
pub const X86_MSI_WINDOW: (u64, u64) = (0xfee0_0000, 0xfeef_ffff);

/// Device parameters chosen by the VMM.
#[derive(Clone, Debug)]
pub struct DeviceConfig {
    /// `page_size_mask`; its lowest set bit is the mapping granularity.
    pub page_size_mask: u64,
    /// IOVA range the device translates, inclusive.
    pub input_range: (u64, u64),
    /// Valid domain ids, inclusive.
    pub domain_range: (u32, u32),
    /// Minimum `probe_size` (raised if the properties need more room).
    pub probe_size: u32,
    /// Initial (and system-reset) value of the `bypass` config field.
    pub bypass: bool,
    /// Offer `VIRTIO_IOMMU_F_BYPASS_CONFIG` (the `bypass` field and
    /// `VIRTIO_IOMMU_ATTACH_F_BYPASS`). The device only tracks which
    /// endpoints bypass; the host must then map guest RAM 1:1 for them.
    /// [`ConfigBuilder`] turns it off: without it Linux builds identity
    /// domains out of MAP requests, which need nothing more.
    pub offer_bypass: bool,
    /// The MSI doorbell window reported as RESV_MEM MSI, inclusive; `None`
    /// on platforms without one.
    pub msi_window: Option<(u64, u64)>,
    /// More reserved IOVA ranges reported as RESV_MEM RESERVED, inclusive.
    pub reserved: Vec<(u64, u64)>,
    /// Most domains that may exist at once.
    pub max_domains: usize,
    /// Most mappings one domain may hold (its deferred unmaps may hold as
    /// many more on the host).
    pub max_mappings_per_domain: usize,
    /// Most bytes of IOVA space one domain's mappings and deferred unmaps
    /// may cover on the host: a guest may map a page at several IOVAs, but
    /// not alias its RAM without bound. Beyond: `S_NOMEM`.
    pub max_bytes_per_domain: u64,
    /// Drain and execute the request queue as batches (true), or one
    /// request at a time with one completion and interrupt each (false).
    pub batching: bool,
    /// Offer `VIRTIO_IOMMU_F_MMIO` (MAP requests with the MMIO flag are then
    /// passed to the mappers without the guest-RAM check).
    pub offer_mmio: bool,
    /// Fault reports kept while the event queue has no buffer.
    pub max_pending_events: usize,
    /// Offer `VIRTIO_IOMMU_F_LAZY_IOTLB_FLUSH` (deferrable UNMAPs and FLUSH).
    pub lazy_unmap: bool,
    /// Offer `VIRTIO_IOMMU_F_POOL_HINT` with these values (`None`: not offered).
    pub pool_hint: Option<PoolHint>,
}

/// The values of the POOL_HINT PROBE property (docs/lazy-unmap-contract.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolHint {
    /// DMA of up to this many bytes is best bounced through a pool buffer.
    pub threshold: u32,
    /// First IOVA of the window suggested for pool buffers.
    pub window_start: u64,
    /// Size of that window in bytes.
    pub window_size: u64,
    /// Suggested most bytes of pool buffers per domain.
    pub pool_max: u64,
}

impl Default for PoolHint {
    fn default() -> Self {
        PoolHint {
            threshold: 64 * 1024,
            window_start: 0x1_0000_0000,
            window_size: 1 << 30,
            pool_max: 64 << 20,
        }
    }
}

impl Default for DeviceConfig {
    fn default() -> Self {
        DeviceConfig {
            page_size_mask: !0xfff,
            input_range: (0, (1 << 48) - 1),
            domain_range: (0, u32::from(u16::MAX)),
            probe_size: 512,
            bypass: false,
            offer_bypass: true,
            msi_window: Some(X86_MSI_WINDOW),
            reserved: Vec::new(),
            max_domains: 1024,
            max_mappings_per_domain: 1 << 16,
            max_bytes_per_domain: 1 << 40,
            batching: true,
            offer_mmio: false,
            max_pending_events: 64,
            lazy_unmap: true,
            pool_hint: Some(PoolHint::default()),
        }
    }
}

/// Checks the POOL_HINT values: a non-empty, granule-aligned window inside
/// `input_range` and outside every reserved region, non-zero sizes.
pub(crate) fn check_pool_hint(cfg: &DeviceConfig, h: &PoolHint, granule: u64) -> Result<(), Error> {
    if h.threshold == 0 || h.pool_max == 0 || h.window_size == 0 {
        return Err(Error::Config(
            "pool hint: zero threshold, window or pool_max",
        ));
    }
    let g = granule - 1;
    if h.window_start & g != 0 || h.window_size & g != 0 {
        return Err(Error::Config(
            "pool hint: window not aligned to the page granule",
        ));
    }
    let last = h
        .window_start
        .checked_add(h.window_size - 1)
        .ok_or(Error::Config("pool hint: window overflows"))?;
    if h.window_start < cfg.input_range.0 || last > cfg.input_range.1 {
        return Err(Error::Config("pool hint: window outside input_range"));
    }
    let hits_reserved = cfg
        .msi_window
        .iter()
        .chain(cfg.reserved.iter())
        .any(|&(s, e)| s <= last && h.window_start <= e);
    if hits_reserved {
        return Err(Error::Config(
            "pool hint: window overlaps a reserved region",
        ));
    }
    Ok(())
}

impl<S: GuestAddressSpace> VirtioIommu<S> {
    pub(crate) fn config(&self) -> wire::Config {
        wire::Config {
            page_size_mask: self.cfg.page_size_mask.into(),
            input_range: wire::Range64 {
                start: self.cfg.input_range.0.into(),
                end: self.cfg.input_range.1.into(),
            },
            domain_range: wire::Range32 {
                start: self.cfg.domain_range.0.into(),
                end: self.cfg.domain_range.1.into(),
            },
            probe_size: self.probe_size.into(),
            bypass: u8::from(self.bypass),
            reserved: [0; 3],
        }
    }

    /// Reads config space at `offset`; bytes past the end read as zero.
    pub fn read_config(&self, offset: u64, data: &mut [u8]) {
        let cfg = self.config();
        let bytes = cfg.as_slice();
        for (i, b) in data.iter_mut().enumerate() {
            *b = usize::try_from(offset)
                .ok()
                .and_then(|o| o.checked_add(i))
                .and_then(|o| bytes.get(o).copied())
                .unwrap_or(0);
        }
    }

    /// Writes config space. Only `bypass` is writable, and only once
    /// `VIRTIO_IOMMU_F_BYPASS_CONFIG` is negotiated; anything else is ignored.
    pub fn write_config(&mut self, offset: u64, data: &[u8]) {
        self.apply_config_write(ConfigWrite::decide(self.acked, offset, data));
    }

    /// Applies a config write decided by [`ConfigWrite::decide`] (by a
    /// transport that coalesces writes); an ignored one is logged, rate
    /// limited. A `bypass` write is checked against the features this
    /// device has negotiated.
    pub fn apply_config_write(&mut self, write: ConfigWrite) {
        match write {
            ConfigWrite::Bypass(b) if self.acked(VIRTIO_IOMMU_F_BYPASS_CONFIG) => self.bypass = b,
            ConfigWrite::Bypass(_) => ConfigWrite::NotNegotiated.log_ignored(),
            ignored => ignored.log_ignored(),
        }
    }
}

/// What a driver's write to the config space does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigWrite {
    /// Sets `bypass`.
    Bypass(bool),
    /// Ignored: not the `bypass` byte (every other field is read-only).
    ReadOnly {
        /// Offset written.
        offset: u64,
        /// Bytes written.
        len: usize,
    },
    /// Ignored: `bypass` without `VIRTIO_IOMMU_F_BYPASS_CONFIG` negotiated.
    NotNegotiated,
    /// Ignored: a `bypass` value other than 0 and 1.
    Invalid(u8),
}

impl ConfigWrite {
    /// What writing `data` at `offset` does on a device whose driver
    /// acked `acked`.
    pub fn decide(acked: u64, offset: u64, data: &[u8]) -> ConfigWrite {
        let [v] = data else {
            return ConfigWrite::ReadOnly {
                offset,
                len: data.len(),
            };
        };
        if offset != wire::CONFIG_BYPASS_OFFSET {
            return ConfigWrite::ReadOnly { offset, len: 1 };
        }
        if acked & (1u64 << VIRTIO_IOMMU_F_BYPASS_CONFIG) == 0 {
            return ConfigWrite::NotNegotiated;
        }
        // Spec: "The driver MUST NOT write a value different than 0 or 1 to bypass".
        match v {
            0 | 1 => ConfigWrite::Bypass(*v == 1),
            v => ConfigWrite::Invalid(*v),
        }
    }

    /// Whether the device ignores this write whatever its state.
    pub fn is_ignored(&self) -> bool {
        !matches!(self, ConfigWrite::Bypass(_))
    }

    /// Whether this write changes the config space `config` (its bytes
    /// as a driver reads them now): an ignored write never does.
    pub fn changes(&self, config: &[u8]) -> bool {
        match self {
            ConfigWrite::Bypass(b) => usize::try_from(wire::CONFIG_BYPASS_OFFSET)
                .ok()
                .and_then(|o| config.get(o))
                .is_none_or(|&cur| cur != u8::from(*b)),
            _ => false,
        }
    }

    /// Logs an ignored write, rate limited (the guest decides how often).
    pub fn log_ignored(&self) {
        match *self {
            ConfigWrite::Bypass(_) => {}
            ConfigWrite::ReadOnly { offset, len } => {
                guest_warn!(offset, len, "driver wrote a read-only config field")
            }
            ConfigWrite::NotNegotiated => {
                guest_warn!("driver wrote bypass without negotiating BYPASS_CONFIG")
            }
            ConfigWrite::Invalid(value) => {
                guest_warn!(value, "driver wrote an invalid bypass value; ignored")
            }
        }
    }
}

/// An input range and the reserved regions inside it, inclusive.
type IovaSpace = ((u64, u64), Vec<(u64, u64)>);

/// Intersection of sorted, disjoint inclusive range lists.
fn intersect(a: &[(u64, u64)], b: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let start = a[i].0.max(b[j].0);
        let end = a[i].1.min(b[j].1);
        if start <= end {
            out.push((start, end));
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// The virtio-iommu's input range and extra reserved regions when its
/// endpoints' host IOMMUs can map the inclusive ranges of `lists`: the
/// span of their intersection, with the holes inside it reserved (except
/// holes within `msi_window`, which the device reports as MSI already).
/// `None` if nothing can be mapped by all of them.
fn iova_space(lists: &[Vec<(u64, u64)>], msi_window: Option<(u64, u64)>) -> Option<IovaSpace> {
    let mut common = lists.first()?.clone();
    common.sort_unstable();
    for l in &lists[1..] {
        let mut l = l.clone();
        l.sort_unstable();
        common = intersect(&common, &l);
    }
    let first = common.first()?.0;
    let last = common.last()?.1;
    let holes = common
        .windows(2)
        .map(|w| (w[0].1 + 1, w[1].0 - 1))
        .filter(|&(s, e)| !msi_window.is_some_and(|(ms, me)| ms <= s && e <= me))
        .collect();
    Some(((first, last), holes))
}

/// `input` without its last page if it reaches 2^64 - 1, as a host IOMMU
/// with a full 64-bit aperture reports it (a virtio-iommu's default input
/// range, some SMMUs): the device keeps `end + 1` representable, so that
/// sizes (`end - start + 1`) never overflow. The page dropped is the
/// smallest the host maps (the lowest bit of `page_size_mask`, else 4 KiB).
fn below_top_page(input: (u64, u64), page_size_mask: u64) -> (u64, u64) {
    if input.1 != u64::MAX {
        return input;
    }
    let page = if page_size_mask == 0 {
        4096
    } else {
        1u64 << page_size_mask.trailing_zeros()
    };
    let end = u64::MAX - page;
    info!(
        end = format_args!("{end:#x}"),
        "host IOMMU maps up to 2^64 - 1; offering the IOVA space without its last page"
    );
    (input.0, end.max(input.0))
}

/// Where a bounce-pool window of `size` bytes fits in `input` (inclusive)
/// clear of the inclusive `reserved` ranges: at `preferred` if it fits
/// there, else the first `align`-aligned place above `preferred`, else the
/// first below it. `None` if no free stretch holds `size` bytes. `align` is
/// a power of two.
fn place_pool_window(
    input: (u64, u64),
    reserved: &[(u64, u64)],
    size: u64,
    preferred: u64,
    align: u64,
) -> Option<u64> {
    if size == 0 || !align.is_power_of_two() {
        return None;
    }
    // The free stretches of `input`, ascending.
    let mut holes: Vec<_> = reserved.to_vec();
    holes.sort_unstable();
    let mut free = Vec::new();
    let mut next = Some(input.0);
    for &(s, e) in &holes {
        let Some(n) = next else { break };
        if e < n || s > input.1 {
            continue;
        }
        if s > n {
            free.push((n, s - 1));
        }
        next = e.checked_add(1);
    }
    if let Some(n) = next.filter(|&n| n <= input.1) {
        free.push((n, input.1));
    }
    // The lowest aligned start at or above `from` in a stretch that holds
    // the window.
    let fit = |from: u64| {
        free.iter().find_map(|&(s, e)| {
            let start = s.max(from).checked_add(align - 1)? & !(align - 1);
            let last = start.checked_add(size - 1)?;
            (last <= e).then_some(start)
        })
    };
    fit(preferred).or_else(|| fit(input.0))
}

/// Sorted union of inclusive ranges: overlapping or adjacent ones merged,
/// empty ones (`first > last`) dropped.
pub fn merge_ranges(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.retain(|&(s, e)| s <= e);
    ranges.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (s, e) in ranges {
        match out.last_mut() {
            Some(last) if s <= last.1.saturating_add(1) => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// Inclusive `ranges` cut to `within`, with `hole` taken out of them.
pub fn clip_ranges(
    ranges: &[(u64, u64)],
    within: (u64, u64),
    hole: Option<(u64, u64)>,
) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for &(s, e) in ranges {
        let (s, e) = (s.max(within.0), e.min(within.1));
        if s > e {
            continue;
        }
        match hole {
            Some((hs, he)) if hs <= e && s <= he => {
                if s < hs {
                    out.push((s, hs - 1));
                }
                if he < e {
                    out.push((he + 1, e));
                }
            }
            _ => out.push((s, e)),
        }
    }
    out
}

/// Builds the [`DeviceConfig`] of a device whose endpoints sit behind host
/// IOMMUs: the VMM says what the host offers, the device decides what to
/// offer the guest.
#[derive(Clone, Debug, Default)]
pub struct ConfigBuilder {
    cfg: DeviceConfig,
    host_ranges: Vec<Vec<(u64, u64)>>,
    ranges_unknown: bool,
    pool: Option<(u32, u64)>,
    avoid: Vec<(u64, u64)>,
}

impl ConfigBuilder {
    /// Starts from [`DeviceConfig::default`] without bypass (nothing maps
    /// guest RAM 1:1 behind a bypassing endpoint; see
    /// [`DeviceConfig::offer_bypass`]).
    pub fn new() -> Self {
        let mut b = Self::default();
        b.cfg.offer_bypass = false;
        b
    }

    /// Offers `VIRTIO_IOMMU_F_LAZY_IOTLB_FLUSH` or not.
    pub fn lazy_unmap(mut self, on: bool) -> Self {
        self.cfg.lazy_unmap = on;
        self
    }

    /// Adds an endpoint's host IOMMU: the page sizes it can map and the
    /// IOVA ranges it can map (inclusive), or why those are unknown.
    pub fn host_iommu(
        mut self,
        page_size_mask: u64,
        iova_ranges: Result<Vec<(u64, u64)>, std::io::Error>,
    ) -> Self {
        self.cfg.page_size_mask &= page_size_mask;
        match iova_ranges {
            Ok(r) => self.host_ranges.push(r),
            Err(e) => {
                warn!(
                    "host IOMMU IOVA ranges unknown ({e}); offering {:#x}-{:#x}",
                    self.cfg.input_range.0, self.cfg.input_range.1
                );
                self.ranges_unknown = true;
            }
        }
        self
    }

    /// Bounds each domain by what the host gives: `avail` is the DMA
    /// mappings a VFIO container still accepts (its `dma_entry_limit`);
    /// a domain's mappings plus its deferred unmaps must fit, so each may
    /// hold half. Unknown (old kernels): the default stays.
    pub fn host_dma_limit(mut self, avail: Result<u32, std::io::Error>) -> Self {
        match avail {
            Ok(n) => {
                let half = (n as usize / 2).max(1);
                self.cfg.max_mappings_per_domain = self.cfg.max_mappings_per_domain.min(half);
            }
            Err(e) => debug!("host DMA-available count unknown ({e})"),
        }
        self
    }

    /// Bounds the IOVA space a domain may cover to 8 times the guest's RAM
    /// (at least 1 GiB): room for every page mapped several times over,
    /// bounce pools included.
    pub fn guest_memory(mut self, bytes: u64) -> Self {
        self.cfg.max_bytes_per_domain = bytes.saturating_mul(8).max(1 << 30);
        self
    }

    /// Offers `VIRTIO_IOMMU_F_POOL_HINT` with this threshold and pool size
    /// (the window is placed by [`Self::build`]), or not.
    pub fn pool(mut self, threshold_and_max: Option<(u32, u64)>) -> Self {
        self.pool = threshold_and_max;
        self
    }

    /// Keeps the guest's IOVAs off these inclusive ranges (host MMIO the
    /// endpoints could reach peer-to-peer, ranges the user reserved): they
    /// become RESV_MEM reserved regions, cut to the input range, with the
    /// MSI window (reported as MSI) taken out.
    pub fn avoid(mut self, ranges: impl IntoIterator<Item = (u64, u64)>) -> Self {
        self.avoid.extend(ranges);
        self
    }

    /// The configuration: the IOVA space every host IOMMU can map (holes
    /// reserved), the ranges to avoid reserved, and the pool hint placed
    /// clear of every reserved region.
    pub fn build(mut self) -> DeviceConfig {
        if !self.ranges_unknown && !self.host_ranges.is_empty() {
            match iova_space(&self.host_ranges, self.cfg.msi_window) {
                Some((input, reserved)) => {
                    let input = below_top_page(input, self.cfg.page_size_mask);
                    let reserved = clip_ranges(&reserved, input, None);
                    info!(
                        ?input,
                        ?reserved,
                        "virtio-iommu IOVA space from the host IOMMU"
                    );
                    self.cfg.input_range = input;
                    self.cfg.reserved = reserved;
                }
                None => warn!("the passed-through devices' IOMMUs share no IOVA range"),
            }
        }
        if !self.avoid.is_empty() {
            let avoid = clip_ranges(
                &merge_ranges(std::mem::take(&mut self.avoid)),
                self.cfg.input_range,
                self.cfg.msi_window,
            );
            info!(ranges = ?avoid, "IOVA ranges kept from the guest (host MMIO, --reserve-iova)");
            let mut all = std::mem::take(&mut self.cfg.reserved);
            all.extend(avoid);
            self.cfg.reserved = merge_ranges(all);
        }
        self.cfg.pool_hint = self
            .pool
            .and_then(|(threshold, pool_max)| pool_hint(&self.cfg, threshold, pool_max));
        info!(
            lazy_unmap = self.cfg.lazy_unmap,
            pool_hint = ?self.cfg.pool_hint,
            "virtio-iommu extensions offered"
        );
        self.cfg
    }
}

/// The POOL_HINT to offer: the default window if it is clear of the
/// device's reserved regions and inside its input range, else another place
/// of the same size, else no hint (the guest then uses its own defaults).
fn pool_hint(cfg: &DeviceConfig, threshold: u32, pool_max: u64) -> Option<PoolHint> {
    let default = PoolHint::default();
    let reserved: Vec<_> = cfg
        .msi_window
        .iter()
        .chain(&cfg.reserved)
        .copied()
        .collect();
    let granule = 1u64 << cfg.page_size_mask.trailing_zeros();
    let align = granule.max(2 << 20);
    let Some(window_start) = place_pool_window(
        cfg.input_range,
        &reserved,
        default.window_size,
        default.window_start,
        align,
    ) else {
        warn!(
            input_range = ?cfg.input_range,
            "no room for a {} MiB bounce-pool window in the IOVA space; not offering the pool hint",
            default.window_size >> 20
        );
        return None;
    };
    if window_start != default.window_start {
        info!(
            window_start = format_args!("{window_start:#x}"),
            "default bounce-pool window is not free; hinting another"
        );
    }
    Some(PoolHint {
        threshold,
        window_start,
        pool_max,
        ..default
    })
}

#[cfg(test)]
mod tests;
