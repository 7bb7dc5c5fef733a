//! The report of a denied system call: the SIGSYS handler names the
//! thread and the call and ends the VMM with [`DENIED_EXIT_CODE`], and the
//! `--seccomp-selftest` hook that shows it.

use std::cell::Cell;

use super::syscall_names;
use super::thread_filter::{spawn, NAME};
use super::{Policy, SeccompError, ThreadKind, DENIED_EXIT_CODE};

/// Where the syscall number is in a `siginfo_t` for SIGSYS on x86_64:
/// after `si_signo`, `si_errno`, `si_code` and padding (16 bytes) comes
/// `_sigsys { void *_call_addr; int _syscall; unsigned _arch; }`.
const SI_SYSCALL_OFFSET: usize = 24;

/// The end of the report: what it means for the user, the workaround and
/// what to report (a call this host's kernel or libc makes that the allow
/// lists do not know yet).
pub const REPORT_TAIL: &[u8] = b"; exiting. The VMM's seccomp allow list lacks this call (a newer \
kernel or libc than it knows?). Workaround: run with --seccomp=false (no filters). Please report \
this line, the output of `uname -r` and `ldd --version | head -1`, and the VMM's version to the \
VMM's maintainers (issue tracker of the project's repository; vmm/README.md, \"Threads and \
seccomp\")\n";

extern "C" fn sigsys_handler(_: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // Only async-signal-safe work: stack buffers, write(2), _exit(2).
    let nr = if info.is_null() {
        -1
    } else {
        // SAFETY: the kernel passes a valid siginfo_t of SIGSYS, in which
        // `_sigsys._syscall` is an int at this offset.
        unsafe { std::ptr::read_unaligned(info.cast::<u8>().add(SI_SYSCALL_OFFSET).cast::<i32>()) }
    };
    let name = NAME.try_with(Cell::get).unwrap_or([0; 16]);
    let name_len = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    let mut line = [0u8; 512];
    let mut n = 0;
    let mut put = |s: &[u8]| {
        for &b in s {
            if n < line.len() {
                line[n] = b;
                n += 1;
            }
        }
    };
    put(b"vmm: seccomp: thread ");
    put(if name_len == 0 {
        b"(unnamed)"
    } else {
        &name[..name_len]
    });
    put(b" made a denied system call (number ");
    let mut digits = [0u8; 12];
    let mut d = digits.len();
    let mut v = i64::from(nr).unsigned_abs();
    loop {
        d -= 1;
        digits[d] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    if nr < 0 {
        put(b"-");
    }
    put(&digits[d..]);
    if let Some(name) = syscall_names::name(i64::from(nr)) {
        put(b", ");
        put(name.as_bytes());
    }
    let hex = |v: u64| {
        let mut h = [0u8; 16];
        for (i, b) in h.iter_mut().enumerate() {
            *b = b"0123456789abcdef"[((v >> ((15 - i) * 4)) & 0xf) as usize];
        }
        h
    };
    // An ioctl: which request (the uapi number names the device call).
    if i64::from(nr) == libc::SYS_ioctl {
        put(b", ioctl request 0x");
        put(&hex(register(ctx, libc::REG_RSI)));
    }
    put(b")");
    // Where the call was made (for addr2line against the binary, with the
    // load address from a rerun under --seccomp=false): which code path
    // wants the call.
    let rip = register(ctx, libc::REG_RIP);
    if rip != 0 {
        put(b" at 0x");
        put(&hex(rip));
    }
    put(REPORT_TAIL);
    // SAFETY: write(2) and _exit(2) are async-signal-safe; `line[..n]` is
    // initialised. Both are allowed in every filter.
    unsafe {
        libc::write(2, line.as_ptr().cast(), n);
        libc::_exit(DENIED_EXIT_CODE);
    }
}

/// A register of the interrupted thread (`libc::REG_*`), from the signal's
/// context; 0 without one.
fn register(ctx: *mut libc::c_void, reg: libc::c_int) -> u64 {
    if ctx.is_null() {
        return 0;
    }
    // SAFETY: for an SA_SIGINFO handler the kernel passes a valid
    // ucontext_t as the third argument; only its registers are read.
    let g = unsafe { &(*ctx.cast::<libc::ucontext_t>()).uc_mcontext.gregs };
    usize::try_from(reg)
        .ok()
        .and_then(|i| g.get(i))
        .map_or(0, |r| *r as u64)
}

/// Install the SIGSYS handler that reports a denied system call (once per
/// process; later calls do nothing).
pub fn install_handler() -> Result<(), SeccompError> {
    static INSTALLED: std::sync::OnceLock<Result<(), i32>> = std::sync::OnceLock::new();
    let r = INSTALLED.get_or_init(|| {
        // SAFETY: a zeroed sigaction is valid; the handler only does
        // async-signal-safe work; `sa` lives across the call.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = sigsys_handler as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO;
            libc::sigemptyset(&mut sa.sa_mask);
            if libc::sigaction(libc::SIGSYS, &sa, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
            }
        }
        Ok(())
    });
    r.map_err(|e| SeccompError::Handler(std::io::Error::from_raw_os_error(e)))
}

/// The ioctl request the vCPU self-test makes (KVM's type, a number KVM
/// does not use).
pub const SELFTEST_IOCTL: u64 = 0xaeff;

/// The `--seccomp-selftest` hook: a thread of `kind`, with its filter,
/// makes a system call no list allows (getppid; a vCPU thread an ioctl
/// request none allows, [`SELFTEST_IOCTL`]), so that the report can
/// be seen. Does not return: the handler ends the process (or, with
/// seccomp off, this returns an error saying nothing was denied).
pub fn selftest(kind: ThreadKind, policy: Policy) -> Result<(), std::io::Error> {
    let filter = policy.filter(kind).map_err(std::io::Error::other)?;
    let name = match kind {
        ThreadKind::Vcpu => "vcpu0",
        ThreadKind::Device => "viommu",
        ThreadKind::Api => "api",
        ThreadKind::Signals => "signals",
        ThreadKind::Serial => "serial-in",
        ThreadKind::Main => "main",
    };
    let h = spawn(name, filter, move || {
        if kind == ThreadKind::Vcpu {
            // An ioctl request no list allows, on no file: the report
            // names the request.
            // SAFETY: an ioctl on an invalid fd has no effect.
            unsafe { libc::ioctl(-1, SELFTEST_IOCTL as _) };
        } else {
            // SAFETY: getppid has no arguments and no side effect.
            unsafe { libc::syscall(libc::SYS_getppid) };
        }
    })?;
    let _ = h.join();
    Err(std::io::Error::other(
        "seccomp self-test: the denied call ran (seccomp off?)",
    ))
}
