//! `vfio-lab-check`: drives the VFIO backend of `dma-mapper` against a real
//! VFIO type1 container, or (`--backend iommufd`) against an iommufd IO
//! address space with the device bound through its VFIO cdev, and checks,
//! through the kernel's own answers, that the host IOMMU state is what the
//! backend's mapping table says.
//!
//! Run inside the lab host (`ci/lab/lab run vfio-backend`) with the NVMe
//! bound to vfio-pci. The kernel is asked directly: mapping a range that is
//! live fails with `EEXIST`, mapping a free one succeeds (and is undone), an
//! unmap that bisects a mapping fails (type1: `EINVAL`; iommufd:
//! `ENOENT`). Each check prints one line
//! `@@LAB-CHECK@@ {"name":..,"ok":..,"detail":..}`; the exit status is
//! non-zero when any check fails. `--backend iommufd-pinned` runs them on
//! the same IOAS with maps served as `IOMMU_IOAS_COPY` from all of the
//! stand-in memory pinned once (`--pin-guest-ram`). With an iommufd
//! backend on a host without `/dev/iommu` or the device's cdev, one
//! `setup` line says what is missing (`"skipped":true`) and the exit
//! status is 0.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use dma_mapper::{
    ContainerOps, DmaError, DmaMapper, DmaPerm, PinnedRamIoas, RecordingMapper, VfioMapper,
};
use iommufd_ioctls::IommuFd;
use vfio_ioctls::{VfioContainer, VfioDevice, VfioIommufd, VfioOps};
use vm_memory::{GuestAddress, GuestMemoryBackend, GuestMemoryMmap};

const PAGE: u64 = 0x1000;

/// Command line.
#[derive(Parser)]
#[command(about = "Check the VFIO DMA backend against the real host kernel")]
struct Cli {
    /// The PCI device bound to vfio-pci, e.g. /sys/bus/pci/devices/0000:00:01.0
    #[arg(long)]
    device: PathBuf,
    /// Size of the stand-in guest memory, in MiB.
    #[arg(long, default_value_t = 16)]
    memory_mib: u64,
    /// The host interface under test.
    #[arg(long, value_enum, default_value_t = Backend::Container)]
    backend: Backend,
}

/// `--backend`.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Backend {
    /// The VFIO type1 container (/dev/vfio/vfio, the device's group).
    Container,
    /// iommufd (/dev/iommu, the device's cdev /dev/vfio/devices/vfioN).
    Iommufd,
    /// iommufd with maps copied from memory pinned once (--pin-guest-ram).
    IommufdPinned,
}

type Mapper<C> = RecordingMapper<VfioMapper<C, GuestMemoryMmap>>;

/// What the checks share: the mapper under test and raw access to the
/// container or IOAS it programs, for asking the kernel.
struct Lab<C: ContainerOps> {
    mapper: Mapper<C>,
    container: Arc<C>,
    scratch_vaddr: u64,
    /// The kernel's errno for an unmap that bisects a mapping.
    split_errno: i32,
    /// "VFIO" or "iommufd", for the details.
    host: &'static str,
}

impl<C: ContainerOps> Lab<C> {
    /// Whether the kernel has anything mapped in `[iova, iova + size)`:
    /// a map of a free range succeeds (and is undone at once), a map over a
    /// live one fails with `EEXIST`.
    fn host_mapped(&self, iova: u64, size: u64) -> Result<bool, String> {
        // SAFETY: the scratch buffer is the start of the stand-in guest
        // memory, which stays mmapped for the life of the mapper and is
        // never accessed through Rust references; the probe mapping is
        // removed again before returning.
        match unsafe {
            self.container
                .map_dma(iova, size, self.scratch_vaddr, DmaPerm::RW)
        } {
            Ok(()) => {
                let n = self
                    .container
                    .unmap_dma(iova, size)
                    .map_err(|e| format!("undoing the probe map at {iova:#x}: {e}"))?;
                if n != size {
                    return Err(format!(
                        "probe unmap at {iova:#x} removed {n:#x} bytes, not {size:#x}"
                    ));
                }
                Ok(false)
            }
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(true),
            Err(e) => Err(format!("probe map at {iova:#x}+{size:#x}: {e}")),
        }
    }

    fn expect_host(&self, iova: u64, size: u64, mapped: bool) -> Result<(), String> {
        match self.host_mapped(iova, size)? {
            m if m == mapped => Ok(()),
            m => Err(format!(
                "kernel says {iova:#x}+{size:#x} is {}mapped, the table says {}mapped",
                if m { "" } else { "not " },
                if mapped { "" } else { "not " }
            )),
        }
    }

    fn map(&self, iova: u64, gpa: u64, size: u64, perm: DmaPerm) -> Result<(), String> {
        self.mapper
            .map(iova, gpa, size, perm)
            .map_err(|e| format!("map {iova:#x}+{size:#x}: {e}"))
    }

    fn unmap(&self, iova: u64, size: u64) -> Result<(), String> {
        self.mapper
            .unmap(iova, size)
            .map_err(|e| format!("unmap {iova:#x}+{size:#x}: {e}"))
    }

    fn unmap_calls(&self) -> u64 {
        self.mapper.stats().unmap_calls
    }
}

type Check<C> = (&'static str, fn(&Lab<C>) -> Result<String, String>);

/// The backend checks, the same for both backends.
fn backend_checks<C: ContainerOps>() -> Vec<Check<C>> {
    let mut all = map_and_unmap_checks();
    all.extend(refusal_and_teardown_checks());
    all
}

/// The backend checks of mapping and unmapping: page sizes, a map and its
/// unmap, coalescing, the refused split, an unmap across holes.
fn map_and_unmap_checks<C: ContainerOps>() -> Vec<Check<C>> {
    vec![
        ("page-sizes", |lab| {
            let mask = lab.mapper.page_size_mask();
            if mask & PAGE == 0 {
                return Err(format!("IOMMU page sizes {mask:#x} lack 4 KiB"));
            }
            Ok(format!("iova_pgsizes {mask:#x}"))
        }),
        ("map-then-unmap", |lab| {
            let (iova, size) = (0x10_0000, 4 * PAGE);
            lab.map(iova, 0, size, DmaPerm::RW)?;
            lab.expect_host(iova + PAGE, PAGE, true)?;
            lab.unmap(iova, size)?;
            lab.expect_host(iova, size, false)?;
            Ok(
            "mapped 16 KiB: kernel refuses an overlapping map; after unmap the range maps freely"
                .into(),
        )
        }),
        ("coalesced-unmap", |lab| {
            let (base, n) = (0x20_0000, 16u64);
            for i in 0..n {
                lab.map(base + i * PAGE, i * PAGE, PAGE, DmaPerm::RW)?;
            }
            lab.expect_host(base + (n - 1) * PAGE, PAGE, true)?;
            let before = lab.unmap_calls();
            lab.unmap(base, n * PAGE)?;
            let calls = lab.unmap_calls() - before;
            lab.expect_host(base, n * PAGE, false)?;
            if calls != 1 {
                return Err(format!("{calls} unmap calls for one coalesced range"));
            }
            Ok(format!(
                "{n} separate 4 KiB maps removed by 1 {} unmap; kernel count matched",
                lab.host
            ))
        }),
        ("split-refused", |lab| {
            let (iova, size) = (0x30_0000, 4 * PAGE);
            lab.map(iova, 0, size, DmaPerm::RW)?;
            match lab.mapper.unmap(iova + PAGE, PAGE) {
                Err(DmaError::SplitMapping { .. }) => {}
                other => {
                    return Err(format!(
                        "a bisecting unmap gave {other:?}, not SplitMapping"
                    ))
                }
            }
            match lab.container.unmap_dma(iova + PAGE, PAGE) {
                Err(e) if e.raw_os_error() == Some(lab.split_errno) => {}
                other => {
                    return Err(format!(
                        "kernel answered a bisecting unmap with {other:?}, not {}",
                        std::io::Error::from_raw_os_error(lab.split_errno)
                    ))
                }
            }
            lab.expect_host(iova, size, true)?;
            lab.unmap(iova, size)?;
            lab.expect_host(iova, size, false)?;
            Ok("backend and kernel both refuse to split a mapping; it stays whole".into())
        }),
        ("unmap-across-holes", |lab| {
            let base = 0x40_0000;
            lab.map(base, 0, PAGE, DmaPerm::RW)?;
            lab.map(base + 2 * PAGE, PAGE, PAGE, DmaPerm::RW)?;
            lab.unmap(base, 4 * PAGE)?;
            lab.expect_host(base, 4 * PAGE, false)?;
            Ok("one unmap over two mappings and holes: kernel count equals the table's".into())
        }),
    ]
}

/// The backend checks of what the guest is refused or what tears down:
/// permissions, overlaps, unmap-all and an unmap of nothing.
fn refusal_and_teardown_checks<C: ContainerOps>() -> Vec<Check<C>> {
    vec![
        ("read-only-and-write-only", |lab| {
            let base = 0x50_0000;
            lab.map(base, 0, PAGE, DmaPerm::RO)?;
            lab.map(base + PAGE, PAGE, PAGE, DmaPerm::WO)?;
            lab.expect_host(base, PAGE, true)?;
            lab.expect_host(base + PAGE, PAGE, true)?;
            lab.unmap(base, 2 * PAGE)?;
            lab.expect_host(base, 2 * PAGE, false)?;
            // VFIO has no query for a mapping's permissions: this proves the
            // kernel took the READ-only and WRITE-only flags, not what DMA may do.
            Ok("kernel accepted READ-only and WRITE-only maps".into())
        }),
        ("map-overlap-refused", |lab| {
            let base = 0x60_0000;
            lab.map(base, 0, 2 * PAGE, DmaPerm::RW)?;
            match lab.mapper.map(base + PAGE, 0, PAGE, DmaPerm::RW) {
                Err(DmaError::Overlap { .. }) => {}
                other => return Err(format!("an overlapping map gave {other:?}, not Overlap")),
            }
            lab.unmap(base, 2 * PAGE)?;
            Ok("an overlapping map is refused and the original stays".into())
        }),
        ("unmap-all", |lab| {
            let base = 0x70_0000;
            for i in 0..3 {
                lab.map(base + i * 4 * PAGE, 0, 2 * PAGE, DmaPerm::RW)?;
            }
            let n = lab
                .mapper
                .inner()
                .unmap_all()
                .map_err(|e| format!("unmap_all: {e}"))?;
            lab.expect_host(base, 12 * PAGE, false)?;
            if n != 6 * PAGE {
                return Err(format!(
                    "unmap_all removed {n:#x} bytes, expected {:#x}",
                    6 * PAGE
                ));
            }
            Ok(format!(
                "{} unmap-all (or its fallback) removed {n:#x} bytes",
                lab.host
            ))
        }),
        ("unmap-of-nothing", |lab| {
            let base = 0x80_0000;
            let before = lab.unmap_calls();
            lab.unmap(base, 16 * PAGE)?;
            if lab.mapper.inner().mapping_count() != 0 {
                return Err("mappings left after the other checks".into());
            }
            lab.expect_host(base, 16 * PAGE, false)?;
            Ok(format!(
                "an unmap of an empty range succeeds ({} backend unmap calls counted)",
                lab.unmap_calls() - before
            ))
        }),
    ]
}

/// Stand-in guest memory of `mib` MiB and its host address.
fn memory(mib: u64) -> Result<(GuestMemoryMmap, u64), String> {
    let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), (mib << 20) as usize)])
        .map_err(|e| format!("allocating {mib} MiB of stand-in guest memory: {e}"))?;
    let scratch_vaddr =
        mem.get_host_address(GuestAddress(0))
            .map_err(|e| format!("host address of the stand-in memory: {e}"))? as u64;
    Ok((mem, scratch_vaddr))
}

/// A lab on `container` (the device attached): the mapper under test over
/// fresh stand-in memory.
fn lab<C: ContainerOps>(
    cli: &Cli,
    container: Arc<C>,
    split_errno: i32,
    host: &'static str,
) -> Result<Lab<C>, String> {
    let (mem, scratch_vaddr) = memory(cli.memory_mib)?;
    // SAFETY: the stand-in guest memory is only ever touched by the device
    // (there is none doing DMA here) and by the kernel's pinning; this
    // program creates no Rust references into it.
    let mapper = RecordingMapper::new(unsafe { VfioMapper::new(container.clone(), mem) });
    Ok(Lab {
        mapper,
        container,
        scratch_vaddr,
        split_errno,
        host,
    })
}

fn setup(cli: &Cli) -> Result<(Lab<VfioContainer>, VfioDevice), String> {
    let container =
        Arc::new(VfioContainer::new(None).map_err(|e| format!("opening /dev/vfio/vfio: {e}"))?);
    // Attaching the device's group to the container sets the IOMMU type.
    let device = VfioDevice::new(&cli.device, container.clone(), false).map_err(|e| {
        format!(
            "opening {}: {e} (is it bound to vfio-pci and is /dev/vfio/N present?)",
            cli.device.display()
        )
    })?;
    Ok((lab(cli, container, libc::EINVAL, "VFIO")?, device))
}

/// What the iommufd backend needs on this host, or why it cannot run:
/// `/dev/iommu` and the device's cdev (named in `vfio-dev/` of its sysfs
/// directory).
fn iommufd_missing(device: &Path) -> Option<String> {
    if !Path::new("/dev/iommu").exists() {
        return Some(
            "no /dev/iommu: the host kernel lacks CONFIG_IOMMUFD (or modprobe iommufd)".into(),
        );
    }
    let cdev = std::fs::read_dir(device.join("vfio-dev"))
        .ok()
        .and_then(|mut d| d.next()?.ok())
        .map(|e| Path::new("/dev/vfio/devices").join(e.file_name()));
    match cdev {
        None => Some(format!(
            "no {}/vfio-dev: the host kernel lacks CONFIG_VFIO_DEVICE_CDEV",
            device.display()
        )),
        Some(node) if !node.exists() => Some(format!("no {}", node.display())),
        Some(_) => None,
    }
}

/// The iommufd lab, with maps as copies from the stand-in memory pinned
/// once in a second IOAS.
fn setup_pinned(cli: &Cli) -> Result<(Lab<PinnedRamIoas>, VfioDevice), String> {
    let (ioas, device) = open_iommufd(cli)?;
    let (mem, scratch_vaddr) = memory(cli.memory_mib)?;
    // SAFETY: as in `lab`: no Rust references into the stand-in memory,
    // which the mapper below keeps mapped for as long as this value lives.
    let pinned = unsafe { PinnedRamIoas::new(ioas, &mem) }
        .map_err(|e| format!("pinning the stand-in memory in a second IOAS: {e}"))?;
    let container = Arc::new(pinned);
    // SAFETY: as in `lab`.
    let mapper = RecordingMapper::new(unsafe { VfioMapper::new(container.clone(), mem) });
    Ok((
        Lab {
            mapper,
            container,
            scratch_vaddr,
            split_errno: libc::ENOENT,
            host: "iommufd (pinned RAM, copies)",
        },
        device,
    ))
}

/// An iommufd with an IOAS and the device bound and attached to it.
fn open_iommufd(cli: &Cli) -> Result<(Arc<VfioIommufd>, VfioDevice), String> {
    let iommufd = Arc::new(IommuFd::new().map_err(|e| format!("opening /dev/iommu: {e}"))?);
    let ioas = Arc::new(
        VfioIommufd::new(iommufd, None, None).map_err(|e| format!("allocating an IOAS: {e}"))?,
    );
    // Binding the cdev to the iommufd and attaching it to the IOAS gives
    // the IOAS the device's IOMMU domain.
    let device =
        VfioDevice::new(&cli.device, ioas.clone() as Arc<dyn VfioOps>, true).map_err(|e| {
            format!(
                "opening {} through its cdev: {e} (bound to vfio-pci? not in use?)",
                cli.device.display()
            )
        })?;
    Ok((ioas, device))
}

fn setup_iommufd(cli: &Cli) -> Result<(Lab<VfioIommufd>, VfioDevice), String> {
    let (ioas, device) = open_iommufd(cli)?;
    Ok((lab(cli, ioas, libc::ENOENT, "iommufd")?, device))
}

fn report(name: &str, ok: bool, detail: &str) {
    let line = serde_json::json!({ "name": name, "ok": ok, "detail": detail });
    println!("@@LAB-CHECK@@ {line}");
}

/// Runs every check on `lab`; the exit status.
fn run<C: ContainerOps>(lab: &Lab<C>) -> ExitCode {
    let mut failed = 0;
    for (name, check) in backend_checks::<C>() {
        match check(lab) {
            Ok(detail) => report(name, true, &detail),
            Err(e) => {
                failed += 1;
                report(name, false, &e);
            }
        }
    }
    let s = lab.mapper.stats();
    report(
        "summary",
        failed == 0,
        &format!(
            "{} checks failed; {} backend calls: {} map, {} unmap, {} failures",
            failed,
            lab.host,
            s.map_calls,
            s.unmap_calls,
            s.map_failures + s.unmap_failures
        ),
    );
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.backend {
        Backend::Container => {
            let (lab, _device) = match setup(&cli) {
                Ok(x) => x,
                Err(e) => {
                    report("setup", false, &e);
                    return ExitCode::FAILURE;
                }
            };
            report(
                "setup",
                true,
                &format!("container with {} attached", cli.device.display()),
            );
            run(&lab)
        }
        Backend::Iommufd | Backend::IommufdPinned => {
            if let Some(why) = iommufd_missing(&cli.device) {
                let line = serde_json::json!({
                    "name": "setup",
                    "ok": true,
                    "skipped": true,
                    "detail": format!("iommufd checks skipped: {why}"),
                });
                println!("@@LAB-CHECK@@ {line}");
                return ExitCode::SUCCESS;
            }
            let attached = format!("iommufd IOAS with {} attached", cli.device.display());
            if cli.backend == Backend::IommufdPinned {
                return match setup_pinned(&cli) {
                    Ok((lab, device)) => {
                        report(
                            "setup",
                            true,
                            &format!("{attached}, stand-in memory pinned"),
                        );
                        finish(&lab, device)
                    }
                    Err(e) => {
                        report("setup", false, &e);
                        ExitCode::FAILURE
                    }
                };
            }
            match setup_iommufd(&cli) {
                Ok((lab, device)) => {
                    report("setup", true, &attached);
                    finish(&lab, device)
                }
                Err(e) => {
                    report("setup", false, &e);
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// Runs the checks, then closes the device before the mapper and its IOAS
/// go (their drop then finds nothing attached).
fn finish<C: ContainerOps>(lab: &Lab<C>, device: VfioDevice) -> ExitCode {
    let rc = run(lab);
    drop(device);
    rc
}
