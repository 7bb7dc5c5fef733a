//! Before any cell: the host's prerequisites, the host's facts and
//! `--pin`, the guest image and what every column launches with; then,
//! once the run is on, what it arms before the first VM (its directories,
//! the KVM exit and breakdown tracing, the pinning, the drive's binding).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::cli::Config;
use crate::columns::{Iommu, Kernel, LaunchInputs};
use crate::plan::{self, rotation_from, Cell, Phase};
use crate::run::host_trace;
use crate::run::kvm_exits::KvmExits;
use crate::run::placement::Layout;
use crate::run::results::utc_timestamp;
use crate::setup::bind::{self, BindGuard};
use crate::setup::host::{self, HostInfo};
use crate::setup::image::{self, ImageInputs};
use crate::setup::modules;
use crate::setup::preflight::guest_kernel::{read_kernel_config, GuestUse};
use crate::setup::preflight::{Checks, Outcome, Problem, SysOpen};
use crate::setup::provenance::Provenance;
use crate::setup::sysfs::Root;

/// What the preparation found and decided, for the rest of the run.
pub struct Prepared {
    /// The host under `--root`.
    pub root: Root,
    /// When the run started, in seconds since the epoch.
    pub started: u64,
    /// The preflight's findings: problems, tools, the drive's facts.
    pub pre: Outcome,
    /// The host's facts for the report.
    pub host: HostInfo,
    /// `--pin`: the CPU list and the CPUs.
    pub pin: Option<(String, Vec<usize>)>,
    /// `--pin-vcpus`: where each VMM's threads go.
    pub placement: Option<Layout>,
    /// Where the results go.
    pub out: PathBuf,
    /// Where the VMs' sockets and traces go while they run.
    pub run_dir: PathBuf,
    /// What every column launches with.
    pub inputs: LaunchInputs,
    /// The guest kernel's command line.
    pub cmdline: String,
    /// The cells, in the order they run.
    pub cells: Vec<Cell>,
    /// The measured phases of every VM.
    pub phases: Vec<Phase>,
    /// One cell's estimated duration.
    pub estimate: Duration,
    /// All the cells' estimated duration.
    pub total: Duration,
    /// Whether stock QEMU's vIOMMU VMs run again to count.
    pub counting: bool,
    /// The code's revisions, the host's tuning, the drive's link.
    pub provenance: Provenance,
}

/// Checks the host and settles the run's inputs; nothing on the host
/// changes. `Err` holds the exit status.
pub fn prepare(cfg: &mut Config) -> Result<Prepared, u8> {
    let dry = cfg.args.dry_run;
    let root = Root::new(&cfg.args.root);
    let started = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut pre = preflight(cfg);
    if !cfg.args.no_bind {
        // A drive a killed run left on vfio-pci is named, not taken.
        let driver = pre.facts.driver.as_deref();
        if let Some((what, fix)) = bind::left_on_vfio(&root, &cfg.bdf, driver) {
            pre.problems.push(Problem { what, fix });
        }
    }
    for p in &pre.problems {
        eprintln!("viommu-bench: {p}");
    }
    if !pre.problems.is_empty() && !dry {
        eprintln!(
            "viommu-bench: {} prerequisite(s) missing; nothing was changed",
            pre.problems.len()
        );
        return Err(2);
    }
    cfg.drive_bytes = pre.facts.namespace_bytes;
    // Said before any VM starts; the counting runs are then skipped.
    if let Some(line) = &pre.qemu_no_trace {
        eprintln!("viommu-bench: {line}");
        cfg.qemu_no_trace = Some(line.clone());
    }
    let cfg = &*cfg;
    let a = &cfg.args;
    let mut host = HostInfo::gather(
        &root,
        &cfg.bdf,
        pre.tools.qemu.as_deref().filter(|_| cfg.uses_qemu()),
    );
    // --pin: every VMM started from here on inherits this thread's CPUs.
    let pin = if a.pin {
        match host::pin_cpus(&root, &cfg.bdf) {
            Ok(p) => Some(p),
            Err(e) => {
                eprintln!("viommu-bench: {e}");
                return Err(2);
            }
        }
    } else {
        None
    };
    host.pinned_cpus = pin.as_ref().map(|(list, _)| list.clone());
    let placement = if a.pin_vcpus {
        match vcpu_layout(
            pin.as_ref().map(|(_, c)| c.as_slice()),
            a.guest_cpus,
            &cfg.bdf,
        ) {
            Ok(l) => Some(l),
            Err(e) => {
                eprintln!("viommu-bench: {e}");
                return Err(2);
            }
        }
    } else {
        None
    };
    let out = out_dir(cfg, started);
    let initramfs = match guest_image(cfg, &pre, dry) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("viommu-bench: guest image: {e}");
            return Err(2);
        }
    };
    let run_dir = std::env::temp_dir().join(format!("viommu-bench-{}", std::process::id()));
    let initramfs_for = match module_images(cfg, &initramfs, dry) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("viommu-bench: guest modules: {e}");
            return Err(2);
        }
    };
    let mut inputs = launch_inputs(cfg, &pre, initramfs);
    inputs.initramfs_for = initramfs_for;
    let cmdline = plan::guest_cmdline(cfg, pre.facts.logical_block_size);
    let cells = rotation_from(cfg.columns.len(), a.first_round - 1, a.rounds);
    let mut provenance = Provenance::gather(
        &root,
        &cfg.bdf,
        cfg.uses_ours().then_some(inputs.vmm.as_path()),
        pre.facts.namespaces.first().map(String::as_str),
    );
    provenance.hugepages = a.hugepages;
    provenance.guest_hugepages = cfg.guest_huge_buffers();
    provenance.vcpu_pinning = placement.as_ref().map(Layout::describe);
    Ok(Prepared {
        provenance,
        phases: plan::phases(cfg),
        estimate: plan::estimate_cell(cfg),
        total: plan::estimate_cells(cfg, &cells),
        counting: cfg.columns.iter().any(|c| c.counts_in_pass()) && cfg.qemu_counts(),
        root,
        started,
        pre,
        host,
        pin,
        placement,
        out,
        run_dir,
        inputs,
        cmdline,
        cells,
    })
}

/// `vmm` next to this program, else the name for a PATH lookup.
fn default_vmm() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("vmm")))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("vmm"))
}

/// `--pin-vcpus`' layout over `--pin`'s CPUs, else the ones this
/// process may use.
fn vcpu_layout(pinned: Option<&[usize]>, guest_cpus: u32, bdf: &str) -> Result<Layout, String> {
    let cpus = match pinned {
        Some(c) => c.to_vec(),
        None => host::affinity().map_err(|e| {
            format!("--pin-vcpus: reading the CPUs this process may use: {e}; drop --pin-vcpus")
        })?,
    };
    Layout::new(&cpus, guest_cpus, bdf)
}

/// The host checks for the columns and flags of `cfg`.
fn preflight(cfg: &Config) -> Outcome {
    let a = &cfg.args;
    let mut kernels = Vec::new();
    if cfg.columns.iter().any(|c| c.kernel == Kernel::Stock) {
        if let Some(k) = &a.kernel_stock {
            kernels.push(("--kernel-stock", k.clone()));
        }
    }
    if cfg.columns.iter().any(|c| c.kernel == Kernel::Patched) {
        if let Some(k) = &a.kernel_patched {
            kernels.push(("--kernel-patched", k.clone()));
        }
    }
    for (name, path) in &cfg.kernels_named {
        if cfg
            .columns
            .iter()
            .any(|c| c.kernel == Kernel::Named(name.clone()))
        {
            kernels.push(("--kernel", path.clone()));
        }
    }
    if let Some(i) = &a.initramfs {
        kernels.push(("--initramfs", i.clone()));
    }
    Checks {
        root: Root::new(&a.root),
        bdf: cfg.bdf.clone(),
        consent: a.destroy_data.clone(),
        no_bind: a.no_bind,
        qemu: cfg.uses_qemu().then(|| a.qemu.clone()),
        qemu_counts: cfg.columns.iter().any(|c| c.counts_in_pass()) && a.count_runtime > 0,
        vmm: cfg
            .uses_ours()
            .then(|| a.vmm.clone().unwrap_or_else(default_vmm)),
        build_image: a.initramfs.is_none(),
        kernels,
        guest_memory: cfg.memory_mib << 20,
        hugepages: a.hugepages,
        path_env: std::env::var_os("PATH"),
        kvm_exits: a.kvm_exits,
        breakdown: a.breakdown,
        block_sizes: cfg.bs.iter().map(|b| (b.label.clone(), b.bytes)).collect(),
        opener: std::sync::Arc::new(SysOpen),
        guest: guest_use(cfg),
    }
    .run()
}

/// Each guest kernel's columns (tag, vIOMMU), and `--modules`.
fn guest_use(cfg: &Config) -> GuestUse {
    let mut columns: BTreeMap<PathBuf, Vec<(String, Iommu)>> = BTreeMap::new();
    for c in &cfg.columns {
        if let Some(k) = cfg.kernel_path(&c.kernel) {
            columns.entry(k).or_default().push((c.tag.clone(), c.iommu));
        }
    }
    GuestUse {
        columns,
        modules: cfg.args.modules.clone(),
        huge_buffers: cfg.args.guest_hugepages,
    }
}

/// The guest image with its modules appended, for each kernel whose config
/// has the guest's drivers as modules (`=m`): by kernel path. A dry run
/// names the modules and writes nothing.
fn module_images(
    cfg: &Config,
    base: &Path,
    dry: bool,
) -> Result<BTreeMap<PathBuf, PathBuf>, String> {
    let cache = cfg.args.cache.clone().unwrap_or_else(image::default_cache);
    let mut out = BTreeMap::new();
    for k in guest_use(cfg).columns.keys() {
        let Ok((config, _)) = read_kernel_config(k) else {
            continue;
        };
        if modules::wanted_modules(&config).is_empty() {
            continue;
        }
        let release = std::fs::read(k)
            .ok()
            .and_then(|b| modules::kernel_release(&b))
            .ok_or_else(|| {
                format!(
                    "{}: no kernel release in its setup header; is it a bzImage?",
                    k.display()
                )
            })?;
        let dir = modules::modules_dir(k, &release, cfg.args.modules.as_deref()).ok_or_else(|| {
            format!(
                "{}: its drivers are modules and no modules directory for release {release} was found; pass --modules DIR",
                k.display()
            )
        })?;
        let paths = modules::modules_for(&dir, &config).map_err(|e| e.to_string())?;
        let names: Vec<String> = paths.iter().map(|p| modules::module_name(p)).collect();
        tracing::info!(
            "{}: loads {} from {}",
            k.display(),
            names.join(", "),
            dir.display()
        );
        if dry {
            continue;
        }
        let layer = modules::modules_layer(&dir, &paths).map_err(|e| e.to_string())?;
        let img =
            modules::image_with_layer(base, &layer, &cache, dry).map_err(|e| e.to_string())?;
        out.insert(k.clone(), img);
    }
    Ok(out)
}

/// `--out`, else a directory named by the start time.
pub fn out_dir(cfg: &Config, now: u64) -> PathBuf {
    cfg.args.out.clone().unwrap_or_else(|| {
        let ts = utc_timestamp(now)
            .replace([':', '-'], "")
            .replace('T', "-")
            .trim_end_matches('Z')
            .to_string();
        PathBuf::from("viommu-bench-results").join(ts)
    })
}

/// The guest image: --initramfs, or built (cached) from this host's programs.
/// In a dry run nothing is written: the path it would have.
fn guest_image(cfg: &Config, pre: &Outcome, dry: bool) -> Result<PathBuf, String> {
    if let Some(i) = &cfg.args.initramfs {
        return Ok(i.clone());
    }
    let cache = cfg.args.cache.clone().unwrap_or_else(image::default_cache);
    let (Some(bb), Some(fio)) = (&pre.tools.busybox, &pre.tools.fio) else {
        return Ok(cache.join("initramfs-<needs fio and busybox>.cpio"));
    };
    let inputs = ImageInputs::gather(bb, fio).map_err(|e| e.to_string())?;
    if dry {
        let key = inputs.key().map_err(|e| e.to_string())?;
        return Ok(cache.join(format!("initramfs-{key}.cpio")));
    }
    image::build_or_reuse(&inputs, &cache).map_err(|e| e.to_string())
}

/// What every column launches with: the programs preflight found (else
/// the flags'), the kernels, the image and the guest's shape.
fn launch_inputs(cfg: &Config, pre: &Outcome, initramfs: PathBuf) -> LaunchInputs {
    let a = &cfg.args;
    LaunchInputs {
        qemu: pre.tools.qemu.clone().unwrap_or_else(|| a.qemu.clone()),
        vmm: pre
            .tools
            .vmm
            .clone()
            .unwrap_or_else(|| a.vmm.clone().unwrap_or_else(default_vmm)),
        kernel_stock: a
            .kernel_stock
            .clone()
            .unwrap_or_else(|| "<--kernel-stock>".into()),
        kernel_patched: a
            .kernel_patched
            .clone()
            .unwrap_or_else(|| "<--kernel-patched>".into()),
        kernels_named: cfg.kernels_named.clone(),
        initramfs,
        initramfs_for: BTreeMap::new(),
        bdf: cfg.bdf.clone(),
        cpus: a.guest_cpus,
        memory_mib: cfg.memory_mib,
        count_runtime: a.count_runtime,
        qemu_no_trace: cfg.qemu_no_trace.clone(),
        breakdown: a.breakdown,
        hugepages: a.hugepages,
        name_threads: a.pin_vcpus,
        host_iova_bits: pre.facts.iova_bits,
    }
}

/// What the run sets up on the host before its first cell; each part is
/// undone when it drops.
pub struct Armed {
    /// The directories of `--out` this run creates, handed to the sudo
    /// user at the end.
    pub created: Option<PathBuf>,
    /// KVM exits per phase (`--kvm-exits`).
    pub kvm_exits: Option<KvmExits>,
    /// The host's tracefs for the breakdown phases (`--breakdown`).
    pub breakdown: Option<host_trace::Settings>,
    /// The drive on vfio-pci, given back when this drops.
    pub guard: Option<BindGuard>,
}

/// Creates the run's directories, installs the tracing asked for, pins
/// and binds the drive, in that order. `Err` holds the exit status.
pub fn arm(cfg: &Config, p: &Prepared) -> Result<Armed, u8> {
    let a = &cfg.args;
    // What this run creates of --out, handed to the sudo user at the end.
    let created = host::first_missing(&p.out.join("logs"));
    for d in [p.out.join("logs"), p.run_dir.clone()] {
        if let Err(e) = std::fs::create_dir_all(&d) {
            eprintln!(
                "viommu-bench: cannot create {}: {e}; pick another --out",
                d.display()
            );
            return Err(2);
        }
    }

    // KVM exits per phase, when asked (triggers removed when this drops),
    // before the drive is bound: a kernel without them changes nothing.
    let kvm_exits = if a.kvm_exits {
        match KvmExits::install(None) {
            Ok(k) => Some(k),
            Err(e) => {
                eprintln!("viommu-bench: {e}");
                return Err(2);
            }
        }
    } else {
        None
    };

    // --breakdown: the host's tracefs, checked (and mounted) before the
    // drive is bound; each breakdown phase makes and removes its instance.
    let breakdown = if a.breakdown {
        let s = host_trace::Settings::new(a.count_runtime);
        if let Err(e) = s.check() {
            eprintln!("viommu-bench: {e}");
            return Err(2);
        }
        Some(s)
    } else {
        None
    };

    if let Some((list, cpus)) = &p.pin {
        if let Err(e) = host::pin_to(cpus) {
            eprintln!("viommu-bench: --pin: pinning to CPUs {list}: {e}; drop --pin");
            return Err(2);
        }
    }

    // Bind (restored when `guard` drops, whatever happens after).
    let mut guard = None;
    if !a.no_bind {
        match BindGuard::bind(&p.root, &cfg.bdf, p.pre.facts.driver.as_deref()) {
            Ok(g) => guard = Some(g.with_timeout(Duration::from_secs(a.restore_timeout))),
            Err(e) => {
                eprintln!("viommu-bench: {e}");
                return Err(1);
            }
        }
    }
    Ok(Armed {
        created,
        kvm_exits,
        breakdown,
        guard,
    })
}
