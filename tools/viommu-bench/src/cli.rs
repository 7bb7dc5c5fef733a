//! Command-line flags and their checks. Everything here is pure: no file
//! is read, so every bad value is reported before the host is looked at.

mod validate;

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::{Parser, ValueEnum};

use crate::columns::{Column, ColumnError, Iommu, Vmm, DEFAULT_COLUMNS};

/// Compare NVMe passthrough behind a virtio-iommu: our VMM vs stock QEMU,
/// stock vs patched guest kernels, vs no vIOMMU, on this host's own drive.
///
/// DESTROYS THE DATA on the drive: it must be named twice, with --device
/// and --destroy-data. Progress goes to stderr, the table to stdout, and
/// results.json, table.md, chart.png and the guests' logs to --out.
#[derive(Debug, Clone, Parser)]
#[command(name = "viommu-bench", version, verbatim_doc_comment)]
pub struct Args {
    /// PCI address of the NVMe drive to pass through, e.g. 0000:01:00.0
    /// (`lspci -D -d ::0108` lists NVMe drives).
    #[arg(
        long,
        value_name = "BDF",
        default_value = "",
        hide_default_value = true,
        required_unless_present = "restore"
    )]
    pub device: String,
    /// Give back a drive a killed run left on vfio-pci (from the state
    /// file in /run/viommu-bench, else to nvme: unbind from vfio-pci,
    /// clear driver_override, reprobe), say what was done, and exit.
    #[arg(long, value_name = "BDF")]
    pub restore: Option<String>,
    /// Seconds to wait for the drive's unbind from vfio-pci when giving it
    /// back (a process still holding the device blocks it).
    #[arg(long, value_name = "S", default_value_t = 60, hide = true)]
    pub restore_timeout: u64,
    /// Consent: the same BDF again, or the drive's serial number
    /// (/sys/bus/pci/devices/BDF/nvme/nvme*/serial). Its data is destroyed.
    #[arg(long, value_name = "BDF|SERIAL")]
    pub destroy_data: Option<String>,
    /// The drive is already bound to vfio-pci: do not bind or restore it.
    #[arg(long)]
    pub no_bind: bool,
    /// Unpatched guest bzImage (guest-patches/linux-6.12/build.sh baseline;
    /// any version with virtio-pci, virtio-iommu, ACPI VIOT and NVMe built
    /// in, =y: the guest image loads no modules).
    #[arg(long, value_name = "PATH")]
    pub kernel_stock: Option<PathBuf>,
    /// Patched guest bzImage (guest-patches/linux-6.12/build.sh patched, or
    /// the 6.1 series' linux-6.1/build.sh patched).
    #[arg(long, value_name = "PATH")]
    pub kernel_patched: Option<PathBuf>,
    /// One more guest kernel, for the columns whose KERNEL field is NAME
    /// (e.g. `--kernel stock-7.3=/path/bzImage --columns
    /// q73:qemu:viommu:stock-7.3`); repeat for more.
    #[arg(long = "kernel", value_name = "NAME=PATH")]
    pub kernels: Vec<String>,
    /// The modules directory of a `--kernel*` whose drivers are modules
    /// (`/lib/modules/RELEASE`, or its parent) [default: lib/modules/RELEASE
    /// beside the kernel's boot/, else /lib/modules/RELEASE].
    #[arg(long, value_name = "DIR")]
    pub modules: Option<PathBuf>,
    /// Use this guest initramfs instead of building one (it must run the
    /// guest protocol of tools/viommu-bench/guest/init as its /init).
    #[arg(long, value_name = "PATH")]
    pub initramfs: Option<PathBuf>,
    /// Where built initramfs images are cached [default: /var/cache/viommu-bench
    /// as root (under sudo too), else $XDG_CACHE_HOME/viommu-bench or
    /// ~/.cache/viommu-bench].
    #[arg(long, value_name = "DIR")]
    pub cache: Option<PathBuf>,
    /// Stock QEMU.
    #[arg(long, value_name = "PATH", default_value = "qemu-system-x86_64")]
    pub qemu: PathBuf,
    /// Our VMM [default: `vmm` next to this program, else in PATH].
    #[arg(long, value_name = "PATH")]
    pub vmm: Option<PathBuf>,
    /// Columns to run, comma-separated: built-in names, or
    /// TAG:VMM:IOMMU:KERNEL[:OPTS] (VMM qemu|ours, IOMMU viommu|vtd|amd|none,
    /// KERNEL stock|patched|NAME, OPTS +-separated guest params, strict, lazy,
    /// --vmm-flags). The default starts with stock QEMU's emulated VT-d, the
    /// baseline: what x86 users run today.
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_COLUMNS)]
    pub columns: Vec<String>,
    /// The column others are compared with in the "vs" column [default: the first].
    #[arg(long, value_name = "TAG")]
    pub baseline: Option<String>,
    /// The column the report leads with: a headline of its IOPS over the
    /// baseline's and the ceiling's, round by round, before every table.
    #[arg(long, value_name = "TAG")]
    pub lead: Option<String>,
    /// fio workload of the measured runs.
    #[arg(long, value_enum, default_value_t = Rw::Randread)]
    pub rw: Rw,
    /// Block sizes, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "4k,16k,64k,128k,256k")]
    pub bs: Vec<String>,
    /// fio iodepth.
    #[arg(long, default_value_t = 64)]
    pub iodepth: u32,
    /// fio jobs, comma-separated: each value is one more measured run per block size.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub numjobs: Vec<u32>,
    /// Guest vCPUs, at most 64 (the guest kernels' CONFIG_NR_CPUS).
    #[arg(long, default_value_t = 1)]
    pub guest_cpus: u32,
    /// Guest RAM, e.g. 1G or 2048M.
    #[arg(long, default_value = "1G")]
    pub guest_memory: String,
    /// Seconds per measured fio run.
    #[arg(long, default_value_t = 10)]
    pub runtime: u32,
    /// Seconds each measured fio run goes on before it is measured (fio
    /// --ramp_time; the VMM's and the guest's counters also start after
    /// it): steady state without the first mappings of fio's buffers.
    #[arg(long, default_value_t = 0)]
    pub ramp: u32,
    /// Seconds of each untimed counting run of stock QEMU's columns behind a
    /// virtio-iommu. No timed run is traced: after its timed runs such a
    /// guest runs each one's fio job again this long, and only then are
    /// QEMU's trace events on (turned on and off over QMP); its requests
    /// and VFIO calls per I/O come from these runs (lower bounds, marked
    /// `untimed`). Our VMM's counts come from the timed runs themselves
    /// (its counters are always on; exact). 0: no counting runs, QEMU
    /// starts with no trace file or QMP socket at all, its counts read
    /// `not counted`.
    #[arg(long, default_value_t = 3, value_name = "S")]
    pub count_runtime: u32,
    /// Run every column this many times, in a balanced order: rounds 2k and
    /// 2k+1 run the columns from column k mod n on, forwards then backwards.
    /// The table's tests pair the columns by round (df = rounds - 1): more
    /// rounds narrow the intervals and let smaller differences show; one
    /// round has no test.
    #[arg(long, default_value_t = 5)]
    pub rounds: u32,
    /// A guest that completes no I/O and prints no marker this long is killed and reported hung.
    #[arg(long, default_value_t = 60)]
    pub stall_seconds: u64,
    /// Bytes written and verified per block size and job before measuring.
    #[arg(long, default_value = "8M")]
    pub verify_size: String,
    /// Before the measured runs each guest writes what they read, so no
    /// read meets a never-written block (which a datacenter drive answers
    /// without touching flash): span = write the first --span bytes
    /// sequentially and keep the measured runs' reads inside them; full =
    /// write the whole namespace; none = neither (reads cover the whole
    /// namespace, written or not).
    #[arg(long, value_enum, default_value_t = Precondition::Span)]
    pub precondition: Precondition,
    /// The span --precondition span writes and the measured runs read
    /// (capped at the namespace's size); several times the drive's cache.
    #[arg(long, default_value = "4G")]
    pub span: String,
    /// Output directory [default: ./viommu-bench-results/TIMESTAMP].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Print the plan (checks, columns, commands) and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// What each guest runs: fio = write+verify at every block size and
    /// mixed sizes, then the measured runs; mixed = one mixed-size
    /// write+verify (4k-256k), then the measured runs; smoke = write+verify
    /// only, plus a 2 s 4k read.
    #[arg(long, value_enum, default_value_t = Mode::Fio)]
    pub mode: Mode,
    /// Run a cell whose guest kernel crashed, reset itself or stalled
    /// before its init again, up to N times (a flaky host or nested
    /// emulation); the first attempt stays in the results as a warning.
    /// Never for a failed verify or a guest that hung after its boot.
    #[arg(long, default_value_t = 0)]
    pub retries: u32,
    /// Number the rounds from R (round R takes its place in the balanced order): one
    /// run split over several boots of a host, as the lab does, one round each.
    #[arg(long, default_value_t = 1, value_name = "R")]
    pub first_round: u32,
    /// Bound on one VM in seconds, whatever its progress [default: four
    /// times the estimate plus --stall-seconds].
    #[arg(long, value_name = "S")]
    pub cell_timeout: Option<u64>,
    /// For a caller that reads only stdout (the lab's serial console): one
    /// `@@LAB-CELL@@ {json}` line per finished VM, and the console log of
    /// every VM that did not finish well, between `---- guest ... ----` lines.
    #[arg(long)]
    pub serial_report: bool,
    /// With --retries: also run a guest that stopped completing I/O again
    /// (the first attempt stays in the results as a warning). For CI,
    /// while intermittent hangs behind our VMM are investigated; off by
    /// default, so a hang is a failure.
    #[arg(long)]
    pub retry_hung: bool,
    /// After the measured runs, one more phase `idle` of this many
    /// milliseconds with no I/O, reported with the guest counters' values at
    /// its end: long enough for the reuse cache's window plus the flush
    /// queue's, it shows what lazy domains held is gone from the host
    /// (results.json: the phase's `device.bytes_unmapped` and `fio.after`).
    #[arg(long, default_value_t = 0, value_name = "MS")]
    pub idle_ms: u64,
    /// Count the host's KVM exits by reason in every measured phase, and
    /// the host IOMMU's map and unmap calls (ftrace hist triggers on the
    /// kvm and iommu events: needs root, tracefs and CONFIG_HIST_TRIGGERS);
    /// the table gains "KVM exits per I/O".
    #[arg(long)]
    pub kvm_exits: bool,
    /// Where a virtio-iommu request's time goes in the VMM, for every
    /// column behind a virtio-iommu (ours and stock QEMU alike): after the
    /// timed runs each such guest runs every fio job again, untimed, for
    /// --count-runtime seconds (phase breakdown-RUN), and the host's
    /// tracefs records only the VMM's threads over the middle half of it:
    /// the request-serving thread's wake-ups and wake-up latency, run time,
    /// ioctl time by VFIO/iommufd command, page pinning (where the host has
    /// kprobe events) and the guest's MMIO write exits. Needs root,
    /// tracefs, the scheduler and syscall tracepoints (CONFIG_FTRACE,
    /// CONFIG_FTRACE_SYSCALLS); the table gains "where a request's time
    /// goes". No timed run is traced.
    #[arg(long)]
    pub breakdown: bool,
    /// Start nothing: read cells (a results.json, or `@@LAB-CELL@@` / JSON
    /// lines of cells) and write the table, results.json and chart for the
    /// columns, block sizes, jobs and rounds given, as a run would. Given
    /// again, the files' rounds are pooled: each file's rounds are numbered
    /// after the previous files' (give --rounds as their total). Pool only
    /// runs of the same code on the same host: the per-round ratios stay
    /// within a round, the IOPS medians mix the runs.
    #[arg(long, value_name = "FILE")]
    pub report_from: Vec<PathBuf>,
    /// Pin every VMM (and its threads) to the CPUs of the drive's NUMA node
    /// (when the drive reports none: a hybrid Intel's P cores, else every
    /// online CPU), the same for every
    /// column; recorded in results.json (`host.pinned_cpus`).
    #[arg(long)]
    pub pin: bool,
    /// Give each guest vCPU thread a CPU of its own and put the VMM's
    /// other threads and the drive's interrupts on the CPUs left, the
    /// same for every column (over --pin's CPUs, else the ones the tool
    /// may use: --guest-cpus + 1 at least). Without it the scheduler
    /// places each boot's threads afresh. Recorded in results.json
    /// (`provenance.vcpu_pinning`) and the report's header.
    #[arg(long)]
    pub pin_vcpus: bool,
    /// Back every column's guest RAM with 2 MiB hugetlbfs pages: our VMM
    /// gets --hugepages, stock QEMU (the ceiling too) a private memfd
    /// memory backend with hugetlb=on. The pages must be reserved first
    /// (checked before anything is bound: --guest-memory / 2 MiB free,
    /// one VM runs at a time): echo N > /proc/sys/vm/nr_hugepages, or
    /// hugepages=N on the host's command line. They stay reserved, out of
    /// the host's other use, until given back (echo 0). Recorded in
    /// results.json (`provenance.hugepages`).
    #[arg(long)]
    pub hugepages: bool,
    /// fio's I/O buffers inside each guest in 2 MiB huge pages, which the
    /// guest's /init reserves before its first I/O (`lab.hugebuf=N` on
    /// its command line: enough for the largest --bs times --iodepth,
    /// per job of the largest --numjobs; fio `--iomem=shmhuge`). Every
    /// I/O of up to 2 MiB is then one physically contiguous range of
    /// guest memory, so the MAP requests a lazy or strict guest sends per
    /// I/O (one per contiguous range) no longer depend on how fragmented
    /// the guest's memory was when fio started, which differs per boot
    /// and with what ran before. Every
    /// column gets it; the guest kernels need CONFIG_HUGETLBFS (checked
    /// with their configs). Recorded in results.json
    /// (`provenance.guest_hugepages`).
    #[arg(long)]
    pub guest_hugepages: bool,
    /// Root of the sysfs/procfs tree to read (for tests).
    #[arg(long, default_value = "/", hide = true)]
    pub root: PathBuf,
}

/// fio --rw of the measured runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Rw {
    /// Random reads.
    Randread,
    /// Random reads through the guest's page cache (not O_DIRECT): every
    /// read lands in fresh page-cache pages, so mappings are rarely reused
    /// (the reuse cache's miss workload).
    RandreadBuffered,
    /// Sequential reads.
    Read,
    /// Random writes.
    Randwrite,
    /// Mixed random reads and writes.
    Randrw,
}

impl Rw {
    /// The fio name.
    pub fn as_str(self) -> &'static str {
        match self {
            Rw::Randread => "randread",
            Rw::RandreadBuffered => "randread-buffered",
            Rw::Read => "read",
            Rw::Randwrite => "randwrite",
            Rw::Randrw => "randrw",
        }
    }
}

/// What the guest writes before measuring (`lab.precondition`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precondition {
    /// Nothing: reads may meet never-written blocks.
    None,
    /// The first --span bytes, sequentially; the measured reads stay inside.
    Span,
    /// The whole namespace, sequentially.
    Full,
}

impl Precondition {
    /// The guest's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Precondition::None => "none",
            Precondition::Span => "span",
            Precondition::Full => "full",
        }
    }
}

/// What each guest runs (`lab.mode` of the guest's init).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Write+verify at every block size and mixed, then the measured runs.
    Fio,
    /// One mixed-size write+verify, then the measured runs.
    Mixed,
    /// Write+verify only, plus a 2 s 4k read.
    Smoke,
}

impl Mode {
    /// The guest's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Fio => "fio",
            Mode::Mixed => "mixed",
            Mode::Smoke => "smoke",
        }
    }
}

/// The most vCPUs a guest may have: the guest kernels' CONFIG_NR_CPUS
/// (guest-patches/config-fragment). A kernel built for fewer CPUs boots
/// with only that many and says nothing, so more are refused.
pub const GUEST_MAX_CPUS: u32 = 64;

/// The huge page `--hugepages` backs guest RAM with: 2 MiB, the x86 size
/// both VMMs ask for (our VMM's MAP_HUGETLB, QEMU's `hugetlbsize=2M`).
pub const HUGE_PAGE_BYTES: u64 = 2 << 20;

/// A flag with a bad value.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CliError {
    /// Not a PCI address.
    #[error("--device {0:?}: not a PCI address; write it as DDDD:BB:DD.F (a domain of 4 to 8 hex digits), e.g. 0000:01:00.0 (lspci -D -d ::0108)")]
    BadBdf(String),
    /// No consent.
    #[error("--destroy-data is missing: this run destroys the data on {0}; repeat its BDF or give its serial: --destroy-data {0}")]
    NoConsent(String),
    /// A size that does not parse or is out of range.
    #[error("{flag} {value:?}: {why}")]
    BadValue {
        /// The flag.
        flag: &'static str,
        /// The value.
        value: String,
        /// What is wrong and what would do.
        why: String,
    },
    /// A column's `--kernel NAME=PATH` kernel was not given.
    #[error("column {column} boots the guest kernel named {name:?}: pass --kernel {name}=PATH")]
    MissingNamedKernel {
        /// The column.
        column: String,
        /// The kernel's name in the column.
        name: String,
    },
    /// A kernel a column needs was not given.
    #[error("column {column} boots the {kernel} guest kernel: pass {flag} PATH (build it with guest-patches/linux-6.12/build.sh {variant})")]
    MissingKernel {
        /// The column.
        column: String,
        /// stock or patched.
        kernel: &'static str,
        /// The flag.
        flag: &'static str,
        /// build.sh's variant.
        variant: &'static str,
    },
    /// A column spec problem.
    #[error(transparent)]
    Column(#[from] ColumnError),
    /// --baseline names no selected column.
    #[error("--baseline {0:?}: not one of the selected columns ({1})")]
    BadBaseline(String, String),
    /// --lead names no selected column.
    #[error("--lead {0:?}: not one of the selected columns ({1})")]
    BadLead(String, String),
}

/// One block size.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BlockSize {
    /// As fio and the phase names write it (`4k`).
    pub label: String,
    /// Bytes.
    pub bytes: u64,
}

/// The checked flags.
#[derive(Debug, Clone)]
pub struct Config {
    /// The flags as given.
    pub args: Args,
    /// The drive, normalized to DDDD:BB:DD.F.
    pub bdf: String,
    /// The `--kernel NAME=PATH` kernels by name.
    pub kernels_named: BTreeMap<String, PathBuf>,
    /// The columns, in order.
    pub columns: Vec<Column>,
    /// The baseline column's index.
    pub baseline: usize,
    /// Block sizes.
    pub bs: Vec<BlockSize>,
    /// numjobs values, deduplicated, in order.
    pub numjobs: Vec<u32>,
    /// Guest RAM in MiB.
    pub memory_mib: u64,
    /// Verify bytes per block size and job.
    pub verify_bytes: u64,
    /// --span in bytes.
    pub span_bytes: u64,
    /// The namespace's size in bytes, once preflight read it (None: unknown,
    /// e.g. the drive is on vfio-pci already).
    pub drive_bytes: Option<u64>,
    /// Why stock QEMU's counting runs are skipped, once preflight found
    /// that its QEMU has no `log` trace backend (None: they run).
    pub qemu_no_trace: Option<String>,
}

/// `s` as a full PCI address: `DDDD:BB:DD.F`, or `BB:DD.F` in domain 0.
/// The domain has 4 to 8 hex digits: Intel VMD puts its drives in
/// domains from `10000` on.
pub fn normalize_bdf(s: &str) -> Option<String> {
    let s = s.trim().to_ascii_lowercase();
    let full = if s.len() == 7 { format!("0000:{s}") } else { s };
    let (domain, rest) = full.split_once(':')?;
    let b = rest.as_bytes();
    let hex = |x: &[u8]| x.iter().all(|c| c.is_ascii_hexdigit());
    let ok = (4..=8).contains(&domain.len())
        && hex(domain.as_bytes())
        && b.len() == 7
        && hex(&b[0..2])
        && b[2] == b':'
        && hex(&b[3..5])
        && b[5] == b'.'
        && (b'0'..=b'7').contains(&b[6]);
    ok.then_some(full)
}

fn bad(flag: &'static str, value: impl ToString, why: impl Into<String>) -> CliError {
    CliError::BadValue {
        flag,
        value: value.to_string(),
        why: why.into(),
    }
}

impl Config {
    /// Whether any column runs stock QEMU.
    pub fn uses_qemu(&self) -> bool {
        self.columns.iter().any(|c| c.vmm == Vmm::Qemu)
    }

    /// The path of a column's guest kernel, if given.
    pub fn kernel_path(&self, k: &crate::columns::Kernel) -> Option<PathBuf> {
        use crate::columns::Kernel;
        match k {
            Kernel::Stock => self.args.kernel_stock.clone(),
            Kernel::Patched => self.args.kernel_patched.clone(),
            Kernel::Named(n) => self.kernels_named.get(n).cloned(),
        }
    }

    /// Whether any column runs our VMM.
    pub fn uses_ours(&self) -> bool {
        self.columns.iter().any(|c| c.vmm == Vmm::Ours)
    }

    /// Whether stock QEMU's vIOMMU columns run their untimed counting
    /// runs: `--count-runtime` above 0 and a QEMU that writes its trace.
    pub fn qemu_counts(&self) -> bool {
        self.args.count_runtime > 0 && self.qemu_no_trace.is_none()
    }

    /// The index of the no-vIOMMU column (the ceiling), if one was selected.
    pub fn ceiling(&self) -> Option<usize> {
        self.columns.iter().position(|c| c.iommu == Iommu::None)
    }

    /// The 2 MiB pages `--guest-hugepages` has each guest reserve for
    /// fio's buffers (None without it): the most one fio run of the
    /// guest's holds at once. fio gives each job its depth times its
    /// largest block in whole huge pages, and takes two more than that
    /// product's whole pages (its O_DIRECT alignment and rounding; fio
    /// 3.33, the guest image's, measured at 4k-1m and depth 16-64: 5
    /// pages fail at 64 x 128k, 6 run); the runs are the measured ones
    /// (`--iodepth`, the largest `--bs`), the verify passes (depth 16,
    /// blocks up to 256 KiB), both with the largest `--numjobs`, and the
    /// preconditioning write (one job, depth 32, 1 MiB blocks).
    pub fn guest_huge_buffers(&self) -> Option<u64> {
        if !self.args.guest_hugepages {
            return None;
        }
        let per_job = |depth: u64, bs: u64| depth * bs / HUGE_PAGE_BYTES + 2;
        let max_bs = self.bs.iter().map(|b| b.bytes).max().unwrap_or(4096);
        let jobs = u64::from(self.numjobs.iter().copied().max().unwrap_or(1));
        let measured = jobs * per_job(u64::from(self.args.iodepth), max_bs);
        let verify = jobs * per_job(16, max_bs.max(256 << 10));
        let pre = match self.args.precondition {
            Precondition::None => 0,
            _ => per_job(32, 1 << 20),
        };
        Some(measured.max(verify).max(pre))
    }
}

#[cfg(test)]
mod tests;
