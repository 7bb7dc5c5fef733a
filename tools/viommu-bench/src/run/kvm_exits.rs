//! KVM exits by reason during each measured phase (`--kvm-exits`), from the
//! host kernel's tracepoints: a `hist` trigger on `kvm:kvm_exit` (keyed by
//! the exit reason) and on the events that say what an exit was for
//! (`kvm_msr` by MSR, `kvm_mmio` by guest-physical address, `kvm_pio` by
//! port, `kvm_userspace_exit` by reason), and the host IOMMU's own map and
//! unmap calls (`iommu:map`, `iommu:unmap` by size: on a host whose IOMMU
//! is emulated, as in the lab, each call is a trip to the emulator; one
//! call covers one physically contiguous run, so the count says how
//! fragmented the guest RAM under the DMA buffers was). The triggers are
//! cleared when a phase begins and read when it ends; the counts are
//! host-wide, so they mean one VM only because the tool runs one VM at a
//! time. Needs root, tracefs and a kernel with `CONFIG_HIST_TRIGGERS`
//! (Debian's has it).
//!
//! Written here rather than taken from a crate: no maintained crate drives
//! ftrace hist triggers, and this is four file writes and one parser.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What the tracing needs and did not find.
#[derive(Debug, thiserror::Error)]
pub enum KvmExitsError {
    /// No tracefs with KVM events.
    #[error("--kvm-exits: no KVM trace events under {0} (mount tracefs: `mount -t tracefs tracefs /sys/kernel/tracing`, load kvm, run as root)")]
    NoEvents(PathBuf),
    /// A trigger file could not be written.
    #[error("--kvm-exits: cannot write {path}: {source} (the kernel needs CONFIG_HIST_TRIGGERS; run as root)")]
    Trigger {
        /// The trigger file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The events traced (`SYSTEM/EVENT` under tracefs's `events/`) and the
/// hist keys of each.
const EVENTS: [(&str, &str); 7] = [
    ("kvm/kvm_exit", "exit_reason"),
    ("kvm/kvm_msr", "ecx,write"),
    ("kvm/kvm_mmio", "type,gpa"),
    ("kvm/kvm_pio", "port,rw"),
    ("kvm/kvm_userspace_exit", "reason"),
    ("iommu/map", "size"),
    ("iommu/unmap", "size"),
];

/// The hist triggers, installed for the tool's lifetime.
#[derive(Debug)]
pub struct KvmExits {
    events: PathBuf,
    svm: bool,
}

impl KvmExits {
    /// Install the triggers under the tracefs at `tracefs` (or
    /// `/sys/kernel/tracing`, mounted if it is not).
    pub fn install(tracefs: Option<&Path>) -> Result<Self, KvmExitsError> {
        let root = tracefs.map_or_else(|| PathBuf::from("/sys/kernel/tracing"), Path::to_path_buf);
        let events = root.join("events");
        if !events.is_dir() && tracefs.is_none() {
            let _ = std::process::Command::new("mount")
                .args(["-t", "tracefs", "tracefs"])
                .arg(&root)
                .status();
        }
        if !events.join("kvm/kvm_exit").is_dir() {
            return Err(KvmExitsError::NoEvents(root));
        }
        let svm = Path::new("/sys/module/kvm_amd").exists();
        let me = KvmExits { events, svm };
        for (ev, keys) in EVENTS {
            me.write(ev, &format!("hist:keys={keys}:size=256"))?;
        }
        Ok(me)
    }

    fn write(&self, ev: &str, cmd: &str) -> Result<(), KvmExitsError> {
        let path = self.events.join(ev).join("trigger");
        if !path.exists() {
            return Ok(()); // older kernels lack some events: count the rest
        }
        // Appending adds or commands a trigger; truncating would remove
        // every other trigger of the event.
        use std::io::Write;
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(cmd.as_bytes()))
            .map_err(|source| KvmExitsError::Trigger { path, source })
    }

    /// Zero every count (a phase begins).
    pub fn clear(&self) -> Result<(), KvmExitsError> {
        for (ev, keys) in EVENTS {
            self.write(ev, &format!("hist:keys={keys}:size=256:clear"))?;
        }
        Ok(())
    }

    /// The counts since the last [`KvmExits::clear`], named
    /// `exit.REASON`, `msr.HEX.r|w`, `mmio.HEX`, `pio.HEX`, `userspace.N`,
    /// `iommu.map` and `iommu.unmap` (calls, all sizes), and
    /// `iommu.map_kib` and `iommu.unmap_kib` (KiB those calls covered).
    pub fn read(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for (ev, _) in EVENTS {
            if let Ok(text) = std::fs::read_to_string(self.events.join(ev).join("hist")) {
                for (k, n) in parse_hist(&text) {
                    *out.entry(self.name(ev, &k)).or_insert(0) += n;
                    if let Some(op) = ev.strip_prefix("iommu/") {
                        let kib = k.get("size").copied().unwrap_or(0) / 1024;
                        *out.entry(format!("iommu.{op}_kib")).or_insert(0) += n * kib;
                    }
                }
            }
        }
        out
    }

    fn name(&self, ev: &str, k: &BTreeMap<String, u64>) -> String {
        let g = |f: &str| k.get(f).copied().unwrap_or(0);
        match ev {
            "kvm/kvm_exit" => format!("exit.{}", exit_reason_name(g("exit_reason"), self.svm)),
            "kvm/kvm_msr" => format!(
                "msr.{:x}.{}",
                g("ecx"),
                if g("write") == 1 { "w" } else { "r" }
            ),
            "kvm/kvm_mmio" => format!("mmio.{:x}", g("gpa")),
            "kvm/kvm_pio" => format!("pio.{:x}", g("port")),
            "iommu/map" => "iommu.map".to_string(),
            "iommu/unmap" => "iommu.unmap".to_string(),
            _ => format!("userspace.{}", g("reason")),
        }
    }
}

impl Drop for KvmExits {
    fn drop(&mut self) {
        for (ev, keys) in EVENTS {
            let _ = self.write(ev, &format!("!hist:keys={keys}:size=256"));
        }
    }
}

/// The entries of a hist file: `{ key: value, key: value } hitcount: N`.
pub fn parse_hist(text: &str) -> Vec<(BTreeMap<String, u64>, u64)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix('{') else {
            continue;
        };
        let Some((keys, count)) = rest.split_once('}') else {
            continue;
        };
        let Some(n) = count
            .trim()
            .strip_prefix("hitcount:")
            .and_then(|n| n.trim().parse().ok())
        else {
            continue;
        };
        let mut k = BTreeMap::new();
        for kv in keys.split(',') {
            if let Some((name, v)) = kv.split_once(':') {
                // Keys print as decimal (or with a symbolic suffix: take
                // the first word).
                let v = v.split_whitespace().next().unwrap_or("");
                if let Ok(v) = v.parse() {
                    k.insert(name.trim().to_string(), v);
                }
            }
        }
        out.push((k, n));
    }
    out
}

/// The name of an exit reason (AMD SVM or Intel VMX numbering).
pub fn exit_reason_name(reason: u64, svm: bool) -> String {
    let name = if svm {
        match reason {
            0x60 => "INTR",
            0x61 => "NMI",
            0x64 => "VINTR",
            0x72 => "CPUID",
            0x78 => "HLT",
            0x7b => "IOIO",
            0x7c => "MSR",
            0x7f => "SHUTDOWN",
            0x81 => "VMMCALL",
            0x8b => "PAUSE",
            0x400 => "NPF",
            0x401 => "AVIC_INCOMPLETE_IPI",
            0x402 => "AVIC_UNACCELERATED",
            _ => "",
        }
    } else {
        match reason {
            0 => "EXCEPTION_NMI",
            1 => "EXTERNAL_INTERRUPT",
            7 => "INTERRUPT_WINDOW",
            10 => "CPUID",
            12 => "HLT",
            18 => "VMCALL",
            30 => "IO_INSTRUCTION",
            31 => "MSR_READ",
            32 => "MSR_WRITE",
            40 => "PAUSE_INSTRUCTION",
            44 => "APIC_ACCESS",
            45 => "EOI_INDUCED",
            48 => "EPT_VIOLATION",
            49 => "EPT_MISCONFIG",
            52 => "PREEMPTION_TIMER",
            56 => "APIC_WRITE",
            _ => "",
        }
    };
    if name.is_empty() {
        format!("{reason:#x}")
    } else {
        name.to_string()
    }
}

#[cfg(test)]
mod tests;
