//! The columns of the comparison: which VMM, with or without a virtio-iommu,
//! which guest kernel, and which guest parameters and VMM flags; and the
//! command line that starts each (the lab runs this tool too, so its
//! guests and a user's start the same way).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The default columns, in order.
pub const DEFAULT_COLUMNS: &str =
    "qemu-vtd+stock,qemu+stock,qemu+patched,ours+stock,ours+patched-strict,ours+patched-lazy,no-viommu";

/// Which VMM runs the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Vmm {
    /// Stock QEMU (`--qemu`).
    Qemu,
    /// Our VMM (`--vmm`).
    Ours,
}

/// Which vIOMMU the NVMe sits behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Iommu {
    /// Behind the VMM's virtio-iommu.
    Viommu,
    /// Behind stock QEMU's emulated Intel VT-d (`intel-iommu`, caching
    /// mode): the guest runs strict whatever its default.
    Vtd,
    /// Behind stock QEMU's emulated AMD-Vi (`amd-iommu,dma-remap=on`,
    /// QEMU 10.2 or later): strict as well.
    Amd,
    /// Plain passthrough: the ceiling.
    None,
}

impl Iommu {
    /// The guest kernel option its driver needs (`y` or `m`), if any.
    pub fn driver_option(self) -> Option<&'static str> {
        match self {
            Iommu::Viommu => Some("CONFIG_VIRTIO_IOMMU"),
            Iommu::Vtd => Some("CONFIG_INTEL_IOMMU"),
            Iommu::Amd => Some("CONFIG_AMD_IOMMU"),
            Iommu::None => Option::None,
        }
    }
}

/// Which guest kernel boots.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kernel {
    /// The unpatched kernel (`--kernel-stock`; 6.12 or 6.1).
    Stock,
    /// The kernel with our series (`--kernel-patched`: guest-patches/linux-6.12
    /// or linux-6.1).
    Patched,
    /// A third (fourth, ...) kernel given as `--kernel NAME=PATH`, e.g. a
    /// stock 7.3 beside the stock 6.12 in one run.
    Named(String),
}

/// Whether NAME can name a `--kernel NAME=PATH` kernel: letters, digits,
/// `.`, `_` and `-`, not one of the two built-in kernels' names.
pub fn valid_kernel_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        && !matches!(name, "stock" | "baseline" | "patched")
}

/// One column of the table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Column {
    /// Its name in the table.
    pub tag: String,
    /// The VMM.
    pub vmm: Vmm,
    /// vIOMMU or not.
    pub iommu: Iommu,
    /// The guest kernel.
    pub kernel: Kernel,
    /// Extra guest kernel parameters (e.g. `iommu.strict=0`).
    pub guest_params: Vec<String>,
    /// Extra VMM flags (e.g. `--pool-threshold=128K`).
    pub vmm_flags: Vec<String>,
}

/// A `--columns` entry that is not a column.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ColumnError {
    /// Neither a built-in name nor a TAG:VMM:IOMMU:KERNEL[:OPTS] spec.
    #[error("--columns {0:?}: unknown column; use one of {DEFAULT_COLUMNS}, or TAG:VMM:IOMMU:KERNEL[:OPTS] (VMM qemu|ours, IOMMU viommu|vtd|amd|none (vtd, amd: qemu only), KERNEL stock|patched|a NAME given with --kernel NAME=PATH, OPTS +-separated guest params, strict, lazy, --vmm-flags)")]
    Unknown(String),
    /// A field of a spec has a bad value.
    #[error("--columns {spec:?}: {field} {value:?} is not one of {allowed}")]
    BadField {
        /// The whole spec.
        spec: String,
        /// Which field.
        field: &'static str,
        /// The bad value.
        value: String,
        /// What it may be.
        allowed: &'static str,
    },
    /// A VMM flag of a column that the tool sets itself.
    #[error("--columns {spec:?}: {flag} is the tool's to set ({why}); leave it out of the column")]
    ToolsFlag {
        /// The whole spec.
        spec: String,
        /// The flag as given.
        flag: String,
        /// Why the tool sets it.
        why: &'static str,
    },
    /// Our VMM with an emulated VT-d or AMD-Vi, which it does not have.
    #[error("--columns {spec:?}: our VMM has no emulated {iommu} (its only vIOMMU is virtio-iommu); use VMM qemu for IOMMU {iommu}, or IOMMU viommu with ours")]
    OursWithout {
        /// The whole spec.
        spec: String,
        /// vtd or amd.
        iommu: &'static str,
    },
    /// Two columns share a tag.
    #[error("--columns: {0:?} appears twice; give each column its own tag")]
    Duplicate(String),
    /// No column at all.
    #[error("--columns is empty; name at least one column, e.g. --columns {DEFAULT_COLUMNS}")]
    Empty,
}

impl Column {
    /// Whether its device counts come from untimed counting runs (stock
    /// QEMU behind a virtio-iommu, whose trace must stay off in the timed
    /// runs), when `--count-runtime` is not 0.
    pub fn counts_in_pass(&self) -> bool {
        self.vmm == Vmm::Qemu && self.iommu == Iommu::Viommu
    }
}

fn col(tag: &str, vmm: Vmm, iommu: Iommu, kernel: Kernel, params: &[&str]) -> Column {
    Column {
        tag: tag.into(),
        vmm,
        iommu,
        kernel,
        guest_params: params.iter().map(|s| s.to_string()).collect(),
        vmm_flags: vec![],
    }
}

/// The built-in column called `name`.
pub fn builtin(name: &str) -> Option<Column> {
    use {Iommu::*, Kernel::*, Vmm::*};
    Some(match name {
        "qemu+stock" => col(name, Qemu, Viommu, Stock, &[]),
        "qemu+patched" => col(name, Qemu, Viommu, Patched, &[]),
        "ours+stock" => col(name, Ours, Viommu, Stock, &[]),
        "ours+patched-strict" => col(name, Ours, Viommu, Patched, &["iommu.strict=1"]),
        "ours+patched-lazy" => col(name, Ours, Viommu, Patched, &["iommu.strict=0"]),
        "no-viommu" => col(name, Qemu, None, Stock, &[]),
        "qemu-vtd+stock" => col(name, Qemu, Vtd, Stock, &[]),
        "qemu-vtd+patched" => col(name, Qemu, Vtd, Patched, &[]),
        "qemu-amd+stock" => col(name, Qemu, Amd, Stock, &[]),
        "qemu-amd+patched" => col(name, Qemu, Amd, Patched, &[]),
        _ => return Option::None,
    })
}

/// One `--columns` entry: a built-in name, or `TAG:VMM:IOMMU:KERNEL[:OPTS]`
/// with OPTS a `+`-separated list of guest kernel parameters, `strict`,
/// `lazy` and VMM flags (starting with `--`), as in the lab's `--runs`.
pub fn parse_column(spec: &str) -> Result<Column, ColumnError> {
    let spec = spec.trim();
    if let Some(c) = builtin(spec) {
        return Ok(c);
    }
    let parts: Vec<&str> = spec.splitn(5, ':').collect();
    if parts.len() < 4 || parts[0].is_empty() {
        return Err(ColumnError::Unknown(spec.into()));
    }
    let bad = |field, value: &str, allowed| ColumnError::BadField {
        spec: spec.into(),
        field,
        value: value.into(),
        allowed,
    };
    let vmm = match parts[1] {
        "qemu" => Vmm::Qemu,
        "ours" | "vmm" => Vmm::Ours,
        v => return Err(bad("VMM", v, "qemu, ours")),
    };
    let iommu = match parts[2] {
        "viommu" => Iommu::Viommu,
        "vtd" => Iommu::Vtd,
        "amd" => Iommu::Amd,
        "none" => Iommu::None,
        v => return Err(bad("IOMMU", v, "viommu, vtd, amd, none")),
    };
    if vmm == Vmm::Ours && matches!(iommu, Iommu::Vtd | Iommu::Amd) {
        return Err(ColumnError::OursWithout {
            spec: spec.into(),
            iommu: if iommu == Iommu::Vtd { "vtd" } else { "amd" },
        });
    }
    let kernel = match parts[3] {
        "stock" | "baseline" => Kernel::Stock,
        "patched" => Kernel::Patched,
        v if valid_kernel_name(v) => Kernel::Named(v.into()),
        v => return Err(bad(
            "KERNEL",
            v,
            "stock, patched, or a NAME of letters, digits, '.', '_', '-' given with --kernel NAME=PATH",
        )),
    };
    let mut c = col(parts[0], vmm, iommu, kernel, &[]);
    for o in parts.get(4).map(|o| o.split('+')).into_iter().flatten() {
        match o {
            "" => {}
            "strict" => c.guest_params.push("iommu.strict=1".into()),
            "lazy" => c.guest_params.push("iommu.strict=0".into()),
            f if f.starts_with("--") => {
                if let Some(why) = tools_flag(f) {
                    return Err(ColumnError::ToolsFlag {
                        spec: spec.into(),
                        flag: f.into(),
                        why,
                    });
                }
                c.vmm_flags.push(f.into())
            }
            p => c.guest_params.push(p.into()),
        }
    }
    Ok(c)
}

/// Our VMM's flags that [`ours_launch`] sets itself, with why: a
/// column's own would clash with them (our VMM refuses a flag given
/// twice) or change what the tool relies on.
const TOOLS_FLAGS: &[(&str, &str)] = &[(
    "--on-reboot",
    "exit: a guest that reboots at the end of its run or after a panic must end its VMM, not run again in it",
)];

/// Why the tool sets VMM flag `f` (`--flag` or `--flag=VALUE`) itself, if it does.
fn tools_flag(f: &str) -> Option<&'static str> {
    let name = f.split_once('=').map_or(f, |(n, _)| n);
    TOOLS_FLAGS
        .iter()
        .find(|(t, _)| *t == name)
        .map(|(_, why)| *why)
}

/// All `--columns` entries, checked for duplicates.
pub fn parse_columns(specs: &[String]) -> Result<Vec<Column>, ColumnError> {
    let mut out: Vec<Column> = Vec::new();
    for s in specs.iter().filter(|s| !s.trim().is_empty()) {
        let c = parse_column(s)?;
        if out.iter().any(|o| o.tag == c.tag) {
            return Err(ColumnError::Duplicate(c.tag));
        }
        out.push(c);
    }
    if out.is_empty() {
        return Err(ColumnError::Empty);
    }
    Ok(out)
}

/// What a command line is built from, besides the column.
#[derive(Debug, Clone)]
pub struct LaunchInputs {
    /// Stock QEMU.
    pub qemu: PathBuf,
    /// Our VMM.
    pub vmm: PathBuf,
    /// Unpatched guest kernel.
    pub kernel_stock: PathBuf,
    /// Patched guest kernel.
    pub kernel_patched: PathBuf,
    /// The `--kernel NAME=PATH` kernels by name.
    pub kernels_named: BTreeMap<String, PathBuf>,
    /// The guest initramfs.
    pub initramfs: PathBuf,
    /// The initramfs of a kernel whose drivers are modules, by the
    /// kernel's path: the guest image with those modules appended.
    pub initramfs_for: BTreeMap<PathBuf, PathBuf>,
    /// The NVMe's PCI address.
    pub bdf: String,
    /// Guest vCPUs.
    pub cpus: u32,
    /// Guest RAM in MiB.
    pub memory_mib: u64,
    /// Seconds of each untimed counting run of stock QEMU's columns behind
    /// a virtio-iommu (`--count-runtime`; 0: none, and no tracing at all).
    pub count_runtime: u32,
    /// Why stock QEMU cannot count (preflight found no `log` trace
    /// backend): its vIOMMU columns then start untraced, with no counting
    /// runs, their counts [`Counting::NoTraceBackend`].
    pub qemu_no_trace: Option<String>,
    /// `--breakdown`: every column behind a virtio-iommu also runs each
    /// fio job again, untimed, for `count_runtime` seconds, while the
    /// host's tracefs records its VMM's threads.
    pub breakdown: bool,
    /// `--hugepages`: guest RAM in 2 MiB hugetlbfs pages, every column.
    pub hugepages: bool,
    /// `--pin-vcpus`: stock QEMU names its threads (`CPU N/KVM`), as our
    /// VMM always does, so they can be told apart.
    pub name_threads: bool,
    /// The IOVA width of the host's IOMMU for the drive, where known: an
    /// emulated VT-d in front of it promises its guest no more.
    pub host_iova_bits: Option<u32>,
}

impl LaunchInputs {
    /// The initramfs `kernel` boots with: its own (with its modules), else
    /// the guest image.
    pub fn initramfs_of(&self, kernel: &Path) -> &Path {
        self.initramfs_for.get(kernel).unwrap_or(&self.initramfs)
    }
}

/// A ready-to-run VMM command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Launch {
    /// The program.
    pub program: PathBuf,
    /// Its arguments, the guest command line last.
    pub args: Vec<String>,
    /// QEMU's trace file (`-D`), when it counts: its events are off but in
    /// the untimed counting phases.
    pub trace: Option<PathBuf>,
    /// QEMU's QMP socket, which turns them on and off.
    #[serde(default)]
    pub qmp: Option<PathBuf>,
    /// QEMU's second QMP socket, every QEMU column's: where its vCPUs are
    /// when its guest hangs ([`crate::run::hang::stock_qemu`]).
    #[serde(default)]
    pub monitor: Option<PathBuf>,
    /// Our VMM's API socket.
    pub api_socket: Option<PathBuf>,
    /// The guest kernel it boots (its System.map beside it names a hung
    /// guest's addresses).
    #[serde(default)]
    pub kernel: Option<PathBuf>,
    /// How its device counts are taken (stock QEMU's [`Counting::Pass`]
    /// is settled by the run: see [`crate::run::trace::QemuTrace::counting`]).
    #[serde(default)]
    pub counting: Counting,
    /// Its guest runs the untimed breakdown runs (`lab.breakdown`), each
    /// started by a `go` on its console (`--breakdown`).
    #[serde(default)]
    pub breakdown: bool,
}

impl Launch {
    /// Whether its guest waits for answers on its console (the VMM's
    /// stdin): untimed counting or breakdown runs.
    pub fn console_input(&self) -> bool {
        self.qmp.is_some() || self.breakdown
    }
}

impl Launch {
    /// The command as one shell-quoted line, for plans and logs.
    pub fn display(&self) -> String {
        std::iter::once(self.program.to_string_lossy().into_owned())
            .chain(self.args.iter().cloned())
            .map(|a| shell_quote(&a))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// The command that starts `col`'s guest with `cmdline` (the guest protocol
/// knobs; the column's own guest parameters are appended), keeping its
/// trace file and QMP socket or API socket in `run_dir` under `name`.
///
/// Stock QEMU behind a virtio-iommu starts untraced: its `-D` file is open
/// and no trace event is on (no `-trace`), so the timed phases run as in a
/// QEMU started without tracing; its guest gets `lab.count=S` (untimed
/// counting runs after the timed ones), answered on the serial console,
/// and the QMP socket turns the events on for those runs only (see
/// [`crate::run::trace`]).
pub fn launch(
    col: &Column,
    inp: &LaunchInputs,
    cmdline: &str,
    run_dir: &Path,
    name: &str,
) -> Launch {
    let unnamed = PathBuf::from("<--kernel NAME=PATH>");
    let kernel = match &col.kernel {
        Kernel::Stock => &inp.kernel_stock,
        Kernel::Patched => &inp.kernel_patched,
        Kernel::Named(n) => inp.kernels_named.get(n).unwrap_or(&unnamed),
    };
    let mut full_cmdline = cmdline.to_string();
    for p in &col.guest_params {
        full_cmdline.push(' ');
        full_cmdline.push_str(p);
    }
    let mut l = match col.vmm {
        Vmm::Qemu => qemu_launch(col, inp, kernel, (run_dir, name), &mut full_cmdline),
        Vmm::Ours => ours_launch(col, inp, kernel, (run_dir, name)),
    };
    // The breakdown runs come last in the guest, after any counting runs.
    let breakdown = inp.breakdown && col.iommu == Iommu::Viommu && inp.count_runtime > 0;
    if breakdown {
        full_cmdline.push_str(&format!(" lab.breakdown={}", inp.count_runtime));
    }
    l.args.push(full_cmdline);
    l.breakdown = breakdown;
    l
}

/// Stock QEMU's command for `col`, up to its `-append`; a counting
/// column's guest gets `lab.count=S` on `cmdline`.
fn qemu_launch(
    col: &Column,
    inp: &LaunchInputs,
    kernel: &Path,
    (run_dir, name): (&Path, &str),
    full_cmdline: &mut String,
) -> Launch {
    let s = |x: &str| x.to_string();
    let p = |x: &Path| x.to_string_lossy().into_owned();
    let mut args = Vec::new();
    let mut trace = None;
    let mut qmp = None;
    let mut counting = Counting::None;
    // An emulated VT-d or AMD-Vi with interrupt remapping needs the
    // IOAPIC in QEMU (kernel-irqchip=split).
    let mut machine = match col.iommu {
        Iommu::Vtd | Iommu::Amd => s("q35,kernel-irqchip=split"),
        _ => s("q35"),
    };
    if inp.hugepages {
        machine.push_str(",memory-backend=ram0");
    }
    args.extend(["-accel", "kvm", "-M"].map(s));
    args.push(machine);
    args.extend(["-cpu", "host", "-smp"].map(s));
    args.push(inp.cpus.to_string());
    args.push(s("-m"));
    args.push(inp.memory_mib.to_string());
    if inp.hugepages {
        args.push(s("-object"));
        args.push(qemu_hugetlb_backend(inp.memory_mib));
    }
    if inp.name_threads {
        args.extend(["-name", "viommu-bench,debug-threads=on"].map(s));
    }
    args.extend(
        [
            "-nodefaults",
            "-display",
            "none",
            "-monitor",
            "none",
            "-serial",
            "stdio",
            "-no-reboot",
            "-net",
            "none",
            "-kernel",
        ]
        .map(s),
    );
    args.push(p(kernel));
    args.push(s("-initrd"));
    args.push(p(inp.initramfs_of(kernel)));
    // An idle socket: nothing on the hot path, as our VMM's API.
    let m = run_dir.join(format!("{name}.mon"));
    args.push(s("-qmp"));
    args.push(format!("unix:{},server=on,wait=off", p(&m)));
    let monitor = Some(m);
    // The IOMMU before the device it translates for.
    if let Some(dev) = vendor_iommu_device(col.iommu, full_cmdline, inp.host_iova_bits) {
        args.push(s("-device"));
        args.push(dev);
    }
    if col.iommu == Iommu::Viommu {
        args.extend(["-device", "virtio-iommu-pci"].map(s));
        if let (true, Some(why)) = (col.counts_in_pass(), &inp.qemu_no_trace) {
            counting = Counting::NoTraceBackend { why: why.clone() };
        } else if col.counts_in_pass() && inp.count_runtime > 0 {
            let t = run_dir.join(format!("{name}.trace"));
            let q = run_dir.join(format!("{name}.qmp"));
            args.push(s("-D"));
            args.push(p(&t));
            args.push(s("-qmp"));
            args.push(format!("unix:{},server=on,wait=off", p(&q)));
            full_cmdline.push_str(&format!(" lab.count={}", inp.count_runtime));
            trace = Some(t);
            qmp = Some(q);
            counting = Counting::Pass;
        } else {
            counting = Counting::NotCounted {
                why: "--count-runtime 0: no counting pass".into(),
            };
        }
    }
    args.push(s("-device"));
    args.push(format!("vfio-pci,host={}", inp.bdf));
    args.extend(col.vmm_flags.iter().cloned());
    args.push(s("-append"));
    Launch {
        program: inp.qemu.clone(),
        args,
        trace,
        qmp,
        monitor,
        api_socket: None,
        kernel: Some(kernel.to_path_buf()),
        counting,
        breakdown: false,
    }
}

/// Stock QEMU's guest RAM in 2 MiB huge pages (`--hugepages`), the
/// `-M ...,memory-backend=ram0` backend: an anonymous hugetlbfs memfd
/// (no hugetlbfs mount needed), mapped private like our VMM's
/// `MAP_PRIVATE | MAP_HUGETLB` RAM, its pages reserved when QEMU maps it
/// (QEMU's `reserve=on`), not preallocated.
fn qemu_hugetlb_backend(memory_mib: u64) -> String {
    format!("memory-backend-memfd,id=ram0,size={memory_mib}M,hugetlb=on,hugetlbsize=2M,share=off")
}

/// Stock QEMU's emulated VT-d or AMD-Vi device for `iommu`, if it is one,
/// with what its guest needs on `cmdline`: VT-d caching mode (without it
/// QEMU refuses vfio-pci) and `intel_iommu=on` (kernels built without
/// INTEL_IOMMU_DEFAULT_ON leave VT-d off without it); AMD-Vi's
/// `dma-remap=on` (without it QEMU refuses vfio-pci; QEMU 10.2 and later).
/// A host IOMMU narrower than 48 bits (`host_bits`) gets a 39-bit VT-d:
/// QEMU 9.0 and later default to 48 and refuse the device otherwise
/// ("aw-bits 48 > host aw-bits 39"); 39 is the other width QEMU offers,
/// and older QEMUs' default.
fn vendor_iommu_device(
    iommu: Iommu,
    cmdline: &mut String,
    host_bits: Option<u32>,
) -> Option<String> {
    match iommu {
        Iommu::Vtd => {
            cmdline.push_str(" intel_iommu=on");
            let narrow = host_bits.is_some_and(|b| b < 48);
            Some(format!(
                "intel-iommu,intremap=on,caching-mode=on{}",
                if narrow { ",aw-bits=39" } else { "" }
            ))
        }
        Iommu::Amd => Some("amd-iommu,dma-remap=on,intremap=on".into()),
        _ => Option::None,
    }
}

/// Our VMM's command for `col`, up to its `--cmdline`.
fn ours_launch(
    col: &Column,
    inp: &LaunchInputs,
    kernel: &Path,
    (run_dir, name): (&Path, &str),
) -> Launch {
    let s = |x: &str| x.to_string();
    let p = |x: &Path| x.to_string_lossy().into_owned();
    let mut args = Vec::new();
    let mut counting = Counting::None;
    let sock = run_dir.join(format!("{name}.sock"));
    args.push(s("--kernel"));
    args.push(p(kernel));
    args.push(s("--initrd"));
    args.push(p(inp.initramfs_of(kernel)));
    args.push(s("--memory"));
    args.push(format!("{}M", inp.memory_mib));
    if inp.hugepages && !col.vmm_flags.iter().any(|f| f == "--hugepages") {
        args.push(s("--hugepages"));
    }
    args.push(s("--cpus"));
    args.push(inp.cpus.to_string());
    args.push(s("--api-socket"));
    args.push(p(&sock));
    args.push(s("--vfio"));
    args.push(format!("/sys/bus/pci/devices/{}", inp.bdf));
    // A guest reboot (the guest's end with lab.end=reboot, a panic with
    // panic=-1) ends the VMM with code 3, as the runner expects: our VMM
    // would otherwise restart the guest, which would run its workload
    // again, and again, instead of ending the cell.
    args.push(s("--on-reboot"));
    args.push(s("exit"));
    if col.iommu == Iommu::Viommu {
        args.push(s("--viommu"));
        counting = Counting::Exact;
    }
    args.extend(col.vmm_flags.iter().cloned());
    args.push(s("--cmdline"));
    Launch {
        program: inp.vmm.clone(),
        args,
        trace: None,
        qmp: None,
        monitor: None,
        api_socket: Some(sock),
        kernel: Some(kernel.to_path_buf()),
        counting,
        breakdown: false,
    }
}

/// How a cell's device counts (virtio-iommu requests and VFIO calls per
/// I/O) were taken. No timed phase runs with an observer on its hot path:
/// our VMM's counters are always on (its device counts in every run; no
/// flag or build leaves them out) and are read only at phase boundaries
/// (see `run::metrics`); stock QEMU's trace events are off in every
/// timed phase and on only in untimed counting phases (see
/// `run::trace`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "how", rename_all = "snake_case")]
pub enum Counting {
    /// No virtio-iommu: nothing to count.
    #[default]
    None,
    /// Our VMM's device counters, read over its API at each phase's begin
    /// and end markers: exact, over the timed phases themselves.
    Exact,
    /// Stock QEMU's trace events, on only in the untimed counting phases
    /// (`count-PHASE`, the same fio job after the timed phases): lower
    /// bounds, of a sample.
    Pass,
    /// Stock QEMU wrote no trace line at all in a counting phase, not even
    /// for the QMP commands that turned its events on: a QEMU without the
    /// `log` trace backend. Its counts are unknown.
    NoTrace {
        /// What was seen and what it means.
        why: String,
    },
    /// Stock QEMU has no `log` trace backend, found before the run (its
    /// `-d help` and `-trace help`): its counting runs were skipped and
    /// its counts are unknown.
    NoTraceBackend {
        /// What was found and what to do.
        why: String,
    },
    /// Stock QEMU's counts were not taken (`--count-runtime 0`, or the
    /// counting phases did not run or failed).
    NotCounted {
        /// Why.
        why: String,
    },
}

#[cfg(test)]
mod tests;
