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

/// A vCPU's registers at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
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
    /// the registers if someone asked.
    pub fn answer(&self, fd: &VcpuFd) {
        if self.asked() {
            self.put(read(fd));
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
    /// for at most `timeout`.
    pub fn sample(&self, signal: libc::c_int, timeout: Duration) -> Option<VcpuSample> {
        let tid = self.tid.load(Ordering::Acquire);
        if tid == 0 {
            return None;
        }
        let before = self.answered.load(Ordering::Acquire);
        self.want.store(true, Ordering::Release);
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            // SAFETY: plain syscalls; a thread that is gone gives ESRCH.
            let rc = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, signal) };
            if rc != 0 {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
            if self.answered.load(Ordering::Acquire) != before {
                return *self.sample.lock().unwrap_or_else(|e| e.into_inner());
            }
        }
        self.want.store(false, Ordering::Release);
        None
    }
}

fn read(fd: &VcpuFd) -> Option<VcpuSample> {
    let (r, s) = (fd.get_regs().ok()?, fd.get_sregs().ok()?);
    Some(VcpuSample {
        rip: r.rip,
        rsp: r.rsp,
        rflags: r.rflags,
        cs: s.cs.selector,
        cr3: s.cr3,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    extern "C" fn noop(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {}

    #[test]
    fn a_kicked_vcpu_thread_answers() {
        let sig = libc::SIGRTMIN();
        vmm_sys_util::signal::register_signal_handler(sig, noop).unwrap();
        let p = Arc::new(VcpuProbe::default());
        let stop = Arc::new(AtomicBool::new(false));
        let t = {
            let (p, stop) = (p.clone(), stop.clone());
            std::thread::spawn(move || {
                p.register_thread();
                let mut n = 0;
                while !stop.load(Ordering::Acquire) {
                    if p.asked() {
                        n += 1;
                        p.put(Some(VcpuSample {
                            rip: 0xffff_ffff_8100_0000 + n,
                            rsp: 0,
                            rflags: 2,
                            cs: 0x10,
                            cr3: 0,
                        }));
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
        };
        while p.tid.load(Ordering::Acquire) == 0 {
            std::thread::yield_now();
        }
        let a = p.sample(sig, Duration::from_secs(5)).unwrap();
        let b = p.sample(sig, Duration::from_secs(5)).unwrap();
        assert_eq!(
            (a.rip & 0xff, b.rip & 0xff),
            (1, 2),
            "a fresh sample each time"
        );
        stop.store(true, Ordering::Release);
        t.join().unwrap();
    }

    #[test]
    fn an_unstarted_vcpu_gives_no_sample() {
        let p = VcpuProbe::default();
        assert_eq!(p.sample(libc::SIGRTMIN(), Duration::from_millis(50)), None);
        assert!(!p.want.load(Ordering::Acquire), "nothing left asked");
    }
}
