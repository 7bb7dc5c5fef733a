//! What stock QEMU says about a guest the tool found hung, read through a
//! QMP monitor the tool gives every QEMU column for this alone (`-qmp
//! unix:NAME.mon`; the counting runs' socket stays with [`crate::run::trace`]):
//!
//! - each vCPU's registers and the kernel text words on its stack (HMP's
//!   `info registers` and `x` through QMP's `human-monitor-command`, the
//!   vCPU chosen by `cpu-index`) and each vCPU thread's CPU time (the
//!   thread ids of `query-cpus-fast`, /proc), in the shape of our VMM's
//!   `GET /api/v1/vm.vcpus`, so [`crate::run::hang::our_vmm::vcpus`] names them as
//!   it names ours (a vCPU whose saved state is the host's is the lab's
//!   emulation, whichever VMM runs it);
//! - the virtio-iommu's request queue, as our VMM's liveness gauges have
//!   it (`x-query-virtio-queue-status`, QEMU 7.2 on, for the device's
//!   indexes; the driver's avail index read from guest memory with HMP's
//!   `xp`), so [`crate::run::hang::our_vmm::diagnose`] and [`crate::run::hang::our_vmm::owed`]
//!   judge a stock QEMU hang by the rule ours is judged by: a vCPU waiting
//!   in the virtio-iommu driver for a request the device has not
//!   completed is the VMM's or the driver's bug, never run again.
//!
//! QEMU has no QMP command for a vCPU's registers; its HMP text is stable
//! (`RIP=... RFL=... CPL=... HLT=...`), so it is parsed here, every value
//! optional: a QEMU that prints less gives a shorter diagnosis, not none.
//! (These commands' answers were checked by hand against Debian 12's QEMU
//! 7.2 and the lab's 11.1, two `-qmp` sockets as the columns have them.)

use std::path::Path;

use serde_json::{json, Value};

use crate::run::qmp::{Qmp, QmpError};

/// Stack words read per vCPU (as our VMM's `vm.vcpus`).
const STACK_WORDS: usize = 64;
/// Where an x86-64 kernel maps its image and modules (the top 2 GiB): the
/// stack words in it are return addresses (or data that looks like them).
const KERNEL_TEXT: std::ops::Range<u64> = 0xffff_ffff_8000_0000..0xffff_ffff_ff00_0000;
/// RFLAGS.IF.
const RFLAGS_IF: u64 = 0x200;

/// One vCPU's registers as HMP's `info registers` prints them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Registers {
    /// Instruction pointer.
    pub rip: Option<u64>,
    /// Stack pointer.
    pub rsp: Option<u64>,
    /// Flags.
    pub rflags: Option<u64>,
    /// Privilege level.
    pub cpl: Option<u64>,
    /// Whether the vCPU is halted (`HLT=1`).
    pub halted: Option<bool>,
}

/// The registers in an `info registers` text (QEMU's x86 dump: tokens
/// `RIP=<hex>`, `RSP=<hex>`, `RFL=<hex>`, `CPL=<n>`, `HLT=<n>`).
pub fn parse_registers(text: &str) -> Registers {
    let mut r = Registers::default();
    for tok in text.split_whitespace() {
        let Some((k, v)) = tok.split_once('=') else {
            continue;
        };
        let hex = || u64::from_str_radix(v, 16).ok();
        match k {
            // A vCPU outside long mode prints the 32-bit names.
            "RIP" | "EIP" => r.rip = hex(),
            "RSP" | "ESP" => r.rsp = hex(),
            "RFL" | "EFL" => r.rflags = hex(),
            "CPL" => r.cpl = v.parse().ok(),
            "HLT" => r.halted = v.parse::<u8>().ok().map(|h| h != 0),
            _ => {}
        }
    }
    r
}

/// The values of an HMP `x` or `xp` text (`ADDR: 0xVALUE 0xVALUE` lines);
/// none from "Cannot access memory".
pub fn parse_dump(text: &str) -> Vec<u64> {
    text.lines()
        .filter_map(|l| l.split_once(':').map(|(_, words)| words))
        .flat_map(str::split_whitespace)
        .filter_map(|w| u64::from_str_radix(w.strip_prefix("0x")?, 16).ok())
        .collect()
}

/// The words of an HMP `x /Ngx ADDR` text that fall in [`KERNEL_TEXT`].
pub fn parse_stack_text(text: &str) -> Vec<u64> {
    parse_dump(text)
        .into_iter()
        .filter(|w| KERNEL_TEXT.contains(w))
        .collect()
}

/// CPU milliseconds of thread `tid` of process `pid` (utime + stime of
/// its /proc stat; USER_HZ is 100), or None.
pub fn thread_cpu_ms(pid: u32, tid: u64) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    parse_thread_stat(&stat)
}

/// CPU milliseconds in a /proc stat line (the fields after the command's
/// closing parenthesis, which may itself hold spaces: `CPU 0/KVM`).
fn parse_thread_stat(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state); utime and stime are fields 14, 15.
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
    Some((ticks(11)? + ticks(12)?) * 10)
}

/// QEMU's vCPUs: their indexes and thread ids (`query-cpus-fast`).
pub async fn threads(q: &mut Qmp) -> Result<Vec<(u64, Option<u64>)>, QmpError> {
    let v = q.execute("query-cpus-fast", Value::Null).await?;
    Ok(v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|c| {
                    let i = c.get("cpu-index")?.as_u64()?;
                    Some((i, c.get("thread-id").and_then(Value::as_u64)))
                })
                .collect()
        })
        .unwrap_or_default())
}

/// One HMP command on vCPU `cpu`, its text.
async fn hmp(q: &mut Qmp, cpu: u64, line: &str) -> Result<String, QmpError> {
    let v = q
        .execute(
            "human-monitor-command",
            json!({ "command-line": line, "cpu-index": cpu }),
        )
        .await?;
    Ok(v.as_str().unwrap_or_default().to_string())
}

/// One reading of a hung QEMU: its vCPUs and its virtio-iommu's
/// request queue.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reading {
    /// The vCPUs, as our VMM's `vm.vcpus` JSON (an array).
    pub vcpus: Value,
    /// The request queue and the vCPU threads' CPU time as our VMM's
    /// liveness gauges (only those fields).
    pub gauges: crate::run::hang::our_vmm::Gauges,
}

/// Read the QEMU at QMP socket `path` (process `pid`, for its threads'
/// CPU time). A vCPU that does not answer has `null` registers and ends
/// the reading (QMP answers in order: a command left without its answer
/// would answer the next); a QEMU without a virtio-iommu, or too old for
/// `x-query-virtio-queue-status`, has no queue gauges.
pub async fn read(path: &Path, pid: Option<u32>) -> Result<Reading, QmpError> {
    let mut q = Qmp::connect(path).await?;
    let cpus = threads(&mut q).await?;
    let mut out = Vec::new();
    let mut answering = true;
    for (i, tid) in cpus {
        let cpu_ms = pid.zip(tid).and_then(|(p, t)| thread_cpu_ms(p, t));
        let mut regs = None;
        let mut stack = Vec::new();
        if answering {
            match hmp(&mut q, i, "info registers").await {
                Ok(t) => {
                    let r = parse_registers(&t);
                    if let (Some(0), Some(sp)) = (r.cpl, r.rsp) {
                        match hmp(&mut q, i, &format!("x /{STACK_WORDS}gx {sp:#x}")).await {
                            Ok(t) => stack = parse_stack_text(&t),
                            Err(_) => answering = false,
                        }
                    }
                    regs = Some(r);
                }
                Err(_) => answering = false,
            }
        }
        let hex = |v: Option<u64>| v.map(|x| format!("{x:#x}"));
        out.push(json!({
            "vcpu": i,
            "cpu_ms": cpu_ms,
            "rip": regs.as_ref().and_then(|r| hex(r.rip)),
            "rsp": regs.as_ref().and_then(|r| hex(r.rsp)),
            "rflags": regs.as_ref().and_then(|r| hex(r.rflags)),
            "interrupts_enabled": regs.as_ref().and_then(|r| r.rflags.map(|f| f & RFLAGS_IF != 0)),
            "cpl": regs.as_ref().and_then(|r| r.cpl),
            "halted": regs.as_ref().and_then(|r| r.halted),
            "stack_text": stack.iter().map(|w| format!("{w:#x}")).collect::<Vec<_>>(),
        }));
    }
    let vcpus = Value::Array(out);
    let mut gauges = crate::run::hang::our_vmm::Gauges {
        vcpu_cpu_ms: cpu_ms(&vcpus),
        ..Default::default()
    };
    if answering {
        queue_gauges(&mut q, &mut gauges).await?;
    }
    Ok(Reading { vcpus, gauges })
}

/// The request queue and the vCPU threads' CPU time alone: a hang's
/// second reading, which asks no vCPU for its registers again.
pub async fn read_gauges(
    path: &Path,
    pid: Option<u32>,
) -> Result<crate::run::hang::our_vmm::Gauges, QmpError> {
    let mut q = Qmp::connect(path).await?;
    let ms: Option<Vec<u64>> = threads(&mut q)
        .await?
        .into_iter()
        .map(|(_, tid)| pid.zip(tid).and_then(|(p, t)| thread_cpu_ms(p, t)))
        .collect();
    let mut gauges = crate::run::hang::our_vmm::Gauges {
        vcpu_cpu_ms: ms.unwrap_or_default(),
        ..Default::default()
    };
    queue_gauges(&mut q, &mut gauges).await?;
    Ok(gauges)
}

/// Set `gauges`' request queue fields from QEMU's, when it has them.
async fn queue_gauges(
    q: &mut Qmp,
    gauges: &mut crate::run::hang::our_vmm::Gauges,
) -> Result<(), QmpError> {
    if let Some(qs) = request_queue(q).await? {
        gauges.driver_avail = qs.driver_avail;
        gauges.device_next_avail = Some(qs.last_avail);
        gauges.used = Some(qs.used);
    }
    Ok(())
}

/// QEMU's virtio-iommu request queue (queue 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct QueueState {
    /// The avail index the device takes next (`last-avail-idx`).
    last_avail: u64,
    /// The used index the device wrote (`used-idx`).
    used: u64,
    /// The driver's avail index, in guest memory (`vring-avail` + 2).
    driver_avail: Option<u64>,
}

/// The virtio-iommu's request queue, or None: no virtio-iommu, or a QEMU
/// that refuses the (unstable, `x-`) commands.
async fn request_queue(q: &mut Qmp) -> Result<Option<QueueState>, QmpError> {
    let devices = match q.execute("x-query-virtio", Value::Null).await {
        Ok(v) => v,
        Err(QmpError::Refused { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let Some(path) = devices.as_array().and_then(|a| {
        a.iter()
            .find(|d| d.get("name").and_then(Value::as_str) == Some("virtio-iommu"))
            .and_then(|d| d.get("path")?.as_str().map(str::to_string))
    }) else {
        return Ok(None);
    };
    let st = match q
        .execute(
            "x-query-virtio-queue-status",
            json!({ "path": path, "queue": 0 }),
        )
        .await
    {
        Ok(v) => v,
        Err(QmpError::Refused { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let n = |k: &str| st.get(k).and_then(Value::as_u64);
    let (Some(last_avail), Some(used)) = (n("last-avail-idx"), n("used-idx")) else {
        return Ok(None);
    };
    // avail ring: flags (le16), then idx (le16).
    let driver_avail = match n("vring-avail") {
        Some(ring) => match q
            .execute(
                "human-monitor-command",
                json!({ "command-line": format!("xp /1hx {:#x}", ring + 2) }),
            )
            .await
        {
            Ok(t) => parse_dump(t.as_str().unwrap_or_default()).first().copied(),
            Err(QmpError::Refused { .. }) => None,
            Err(e) => return Err(e),
        },
        None => None,
    };
    Ok(Some(QueueState {
        last_avail,
        used,
        driver_avail,
    }))
}

/// The `cpu_ms` of each vCPU in a [`read`] answer, in vCPU order (empty
/// when any is missing: a partial list would compare the wrong threads).
pub fn cpu_ms(vcpus: &Value) -> Vec<u64> {
    let v: Option<Vec<u64>> = vcpus.as_array().map_or(Some(Vec::new()), |a| {
        a.iter().map(|c| c.get("cpu_ms")?.as_u64()).collect()
    });
    v.unwrap_or_default()
}

#[cfg(test)]
mod tests;
