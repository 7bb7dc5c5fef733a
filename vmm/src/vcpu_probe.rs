//! Where a vCPU is, asked from another thread (`GET /api/v1/vm.vcpus`): a
//! guest whose vCPU spins with interrupts off says nothing on its console,
//! and its instruction pointer is what tells where it is stuck.
//!
//! The asking thread marks the probe and kicks the vCPU thread with the
//! vCPU kick signal (`tgkill`); `KVM_RUN` returns `EINTR`, the vCPU thread
//! reads its registers before it enters the guest again, and the asker
//! waits a bounded time for them. A vCPU that does not come back (stuck in
//! a device call) gives no sample.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kvm_ioctls::VcpuFd;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// Stack words a sample keeps (one page at most: the read stops at the
/// page end, since the next page of the stack need not be contiguous).
const STACK_WORDS: usize = 64;
/// Where an x86-64 kernel maps its image and modules (the top 2 GiB):
/// stack words in that range are return addresses, or data that looks
/// like them, and give a hung vCPU's call chain once symbolized.
const KERNEL_TEXT: std::ops::Range<u64> = 0xffff_ffff_8000_0000..0xffff_ffff_ff00_0000;

/// A vCPU's registers at one moment.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct VcpuSample {
    /// Instruction pointer.
    pub rip: u64,
    /// Stack pointer.
    pub rsp: u64,
    /// Flags (bit 9: interrupts enabled).
    pub rflags: u64,
    /// Code segment selector (its low two bits: the privilege level).
    pub cs: u16,
    /// Page table root.
    pub cr3: u64,
    /// The words on the stack from `rsp` up (at most `STACK_WORDS`, to
    /// the end of rsp's page) that fall in the kernel's image and module
    /// range, in stack order: a hung kernel's call chain, to symbolize
    /// with the guest kernel's System.map (`ci/lab/symbolize`). Empty for
    /// user mode or an untranslatable rsp.
    pub stack_text: Vec<u64>,
}

/// The meeting point of an asking thread and one vCPU thread.
#[derive(Debug, Default)]
pub struct VcpuProbe {
    /// The vCPU thread's kernel thread id (0 until it runs).
    tid: AtomicI32,
    want: AtomicBool,
    /// Requests answered so far.
    answered: AtomicU64,
    sample: Mutex<Option<VcpuSample>>,
}

impl VcpuProbe {
    /// Called by the vCPU thread when it starts.
    pub fn register_thread(&self) {
        // SAFETY: gettid has no preconditions and cannot fail.
        self.tid.store(unsafe { libc::gettid() }, Ordering::Release);
    }

    /// Called by the vCPU thread before each entry into the guest: reads
    /// the registers (and the kernel words on the stack, from `mem`) if
    /// someone asked.
    pub fn answer(&self, fd: &VcpuFd, mem: &GuestMemoryMmap) {
        if self.asked() {
            self.put(read(fd, mem));
        }
    }

    /// Whether a sample is asked for (and the request taken).
    fn asked(&self) -> bool {
        self.want.swap(false, Ordering::AcqRel)
    }

    fn put(&self, sample: Option<VcpuSample>) {
        *self.sample.lock().unwrap_or_else(|e| e.into_inner()) = sample;
        self.answered.fetch_add(1, Ordering::AcqRel);
    }

    /// Ask for the registers, kicking the vCPU with `signal` every 10 ms,
    /// for at most `timeout` (blocking: see [`ask`](Self::ask) for the
    /// pieces, for a caller that must not block).
    pub fn sample(&self, signal: libc::c_int, timeout: Duration) -> Option<VcpuSample> {
        let ask = self.ask()?;
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if !self.kick(ask, signal) {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
            if let Some(sample) = self.answer_to(ask) {
                return sample;
            }
        }
        self.give_up();
        None
    }

    /// Asks for the registers; `None` if the vCPU thread never ran. Then
    /// [`kick`](Self::kick) until [`answer_to`](Self::answer_to) has the
    /// answer, or [`give_up`](Self::give_up).
    pub fn ask(&self) -> Option<Ask> {
        let tid = self.tid.load(Ordering::Acquire);
        if tid == 0 {
            return None;
        }
        let answered = self.answered.load(Ordering::Acquire);
        self.want.store(true, Ordering::Release);
        Some(Ask { tid, answered })
    }

    /// Kicks the vCPU thread out of `KVM_RUN` with `signal`; false if the
    /// thread is gone.
    pub fn kick(&self, ask: Ask, signal: libc::c_int) -> bool {
        // SAFETY: plain syscalls; a thread that is gone gives ESRCH.
        let rc = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), ask.tid, signal) };
        rc == 0
    }

    /// The answer to `ask`, once the vCPU gave it (`Some(None)`: it could
    /// not read its registers).
    pub fn answer_to(&self, ask: Ask) -> Option<Option<VcpuSample>> {
        (self.answered.load(Ordering::Acquire) != ask.answered).then(|| {
            self.sample
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
        })
    }

    /// Withdraws the question (the vCPU did not answer in time).
    pub fn give_up(&self) {
        self.want.store(false, Ordering::Release);
    }
}

/// A question to a vCPU ([`VcpuProbe::ask`]).
#[derive(Debug, Clone, Copy)]
pub struct Ask {
    tid: i32,
    answered: u64,
}

fn read(fd: &VcpuFd, mem: &GuestMemoryMmap) -> Option<VcpuSample> {
    let (r, s) = (fd.get_regs().ok()?, fd.get_sregs().ok()?);
    let stack_text = if s.cs.selector & 3 == 0 {
        fd.translate_gva(r.rsp)
            .ok()
            .filter(|t| t.valid != 0)
            .map(|t| kernel_words(mem, t.physical_address))
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    Some(VcpuSample {
        rip: r.rip,
        rsp: r.rsp,
        rflags: r.rflags,
        cs: s.cs.selector,
        cr3: s.cr3,
        stack_text,
    })
}

/// The words from guest-physical `gpa` to the end of its page (at most
/// [`STACK_WORDS`]) that fall in [`KERNEL_TEXT`].
fn kernel_words(mem: &GuestMemoryMmap, gpa: u64) -> Vec<u64> {
    let to_page_end = (4096 - (gpa & 0xfff)) / 8;
    let n = usize::try_from(to_page_end).map_or(STACK_WORDS, |n| n.min(STACK_WORDS));
    let mut buf = vec![0u8; n * 8];
    if mem.read_slice(&mut buf, GuestAddress(gpa)).is_err() {
        return Vec::new();
    }
    buf.chunks_exact(8)
        .filter_map(|c| c.try_into().ok().map(u64::from_le_bytes))
        .filter(|w| KERNEL_TEXT.contains(w))
        .collect()
}

#[cfg(test)]
mod tests;
