//! The whole VMM on KVM with a guest of a few instructions: the main
//! thread runs its teardown under its own seccomp filter (a call the
//! filter lacks would end the VMM with 159), and is filtered while the
//! guest runs. Needs /dev/kvm (as root); without it the tests say so and
//! pass, as the lab runs them on real guests.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A file linux-loader takes for a 64-bit bzImage whose entry point (the
/// 64-bit entry, 0x200 into the protected-mode code at 1 MiB) runs `code`
/// followed by `hlt` forever.
fn kernel(dir: &Path, name: &str, code: &[u8]) -> PathBuf {
    let mut img = vec![0u8; 2 * 512];
    img[0x1f1] = 1; // setup_sects
    img[0x1fe..0x200].copy_from_slice(&0xaa55u16.to_le_bytes());
    img[0x202..0x206].copy_from_slice(b"HdrS");
    img[0x206..0x208].copy_from_slice(&0x020fu16.to_le_bytes()); // boot protocol
    img[0x211] = 1; // loadflags: LOADED_HIGH
    img[0x214..0x218].copy_from_slice(&0x10_0000u32.to_le_bytes()); // code32_start
    img[0x22c..0x230].copy_from_slice(&0x7fff_ffffu32.to_le_bytes()); // initrd_addr_max
    img[0x236..0x238].copy_from_slice(&1u16.to_le_bytes()); // XLF_KERNEL_64
    img[0x238..0x23c].copy_from_slice(&2048u32.to_le_bytes()); // cmdline_size
    let mut payload = vec![0xf4u8; 0x3000]; // hlt
    payload[0x200..0x200 + code.len()].copy_from_slice(code);
    img.extend_from_slice(&payload);
    let p = dir.join(name);
    std::fs::write(&p, img).unwrap();
    p
}

/// Whether this host can create a KVM VM.
fn kvm_usable() -> bool {
    let Ok(f) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
    else {
        return false;
    };
    // KVM_CREATE_VM = _IO(0xae, 0x01).
    // SAFETY: an ioctl on an open /dev/kvm with no argument; the VM fd it
    // returns is closed at once.
    let vm = unsafe { libc::ioctl(std::os::fd::AsRawFd::as_raw_fd(&f), 0xae01, 0) };
    if vm < 0 {
        return false;
    }
    // SAFETY: `vm` was just returned to us.
    unsafe { libc::close(vm) };
    true
}

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("vmm-main-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Our VMM with a virtio-iommu and an API socket, and `extra` flags.
fn command(kernel: &Path, socket: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_vmm"));
    c.arg("--kernel")
        .arg(kernel)
        .args(["--memory", "64M", "--viommu", "--api-socket"])
        .arg(socket)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

fn vmm(kernel: &Path, socket: &Path, extra: &[&str]) -> Child {
    command(kernel, socket, extra).spawn().expect("run vmm")
}

fn wait(child: Child) -> (Option<i32>, String) {
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A guest that resets at once (i8042 0xfe), with `--on-reboot exit`:
/// the VMM stops the vCPU, the virtio-iommu's thread and the API,
/// releases the devices and removes the socket, all under the main
/// thread's filter: exit code 3 (reset), not 159.
#[test]
fn the_teardown_runs_under_the_main_threads_filter() {
    if !kvm_usable() {
        eprintln!("no usable /dev/kvm: skipped");
        return;
    }
    let d = scratch("reset");
    // mov al, 0xfe; out 0x64, al
    let k = kernel(&d, "reset", &[0xb0, 0xfe, 0xe6, 0x64]);
    let sock = d.join("api.sock");
    let (code, err) = wait(vmm(&k, &sock, &["--on-reboot", "exit"]));
    assert_eq!(code, Some(3), "{err}");
    assert!(!err.contains("seccomp: thread"), "{err}");
    assert!(!sock.exists(), "the socket is removed at exit");
    std::fs::remove_dir_all(&d).unwrap();
}

/// While a guest runs, the main thread is filtered (its task status says
/// so); SIGTERM then stops the VM in order (exit code 143).
#[test]
fn the_main_thread_is_filtered_while_the_guest_runs() {
    if !kvm_usable() {
        eprintln!("no usable /dev/kvm: skipped");
        return;
    }
    let d = scratch("hlt");
    let k = kernel(&d, "hlt", &[]);
    let sock = d.join("api.sock");
    let child = vmm(&k, &sock, &[]);
    let pid = child.id();
    // The socket appears after the setup; the filter is installed just
    // after that.
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = format!("/proc/{pid}/task/{pid}/status");
    let mut mode = String::new();
    while Instant::now() < deadline {
        let s = std::fs::read_to_string(&status).unwrap_or_default();
        mode = s
            .lines()
            .find(|l| l.starts_with("Seccomp:"))
            .unwrap_or("")
            .to_string();
        if sock.exists() && mode.ends_with('2') {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid_t = i32::try_from(pid).unwrap();
    // SAFETY: our child's pid.
    unsafe { libc::kill(pid_t, libc::SIGTERM) };
    let (code, err) = wait(child);
    assert_eq!(mode, "Seccomp:\t2", "main thread's seccomp mode; {err}");
    assert_eq!(code, Some(143), "{err}");
    assert!(!sock.exists(), "the socket is removed at exit");
    std::fs::remove_dir_all(&d).unwrap();
}

/// The same guest under the default `--on-reboot restart`: each reset is
/// served in place (vCPU parked and given its first-boot state, the
/// virtio-iommu reset on its thread, the guest reloaded), under the
/// main thread's and the vCPU's filters, until `--reboot-limit 2/600`
/// ends the VMM at the third reset: exit code 1, not 159.
#[test]
fn a_reboot_in_place_runs_under_the_threads_filters() {
    if !kvm_usable() {
        eprintln!("no usable /dev/kvm: skipped");
        return;
    }
    let d = scratch("restart");
    // mov al, 0xfe; out 0x64, al
    let k = kernel(&d, "reset", &[0xb0, 0xfe, 0xe6, 0x64]);
    let sock = d.join("api.sock");
    let (code, err) = wait(
        command(&k, &sock, &["--reboot-limit", "2/600"])
            .env("RUST_LOG", "info")
            .spawn()
            .expect("run vmm"),
    );
    assert!(!err.contains("seccomp: thread"), "{err}");
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(
        err.matches("restarting the guest in place").count(),
        2,
        "{err}"
    );
    assert!(err.contains("more than 2 times in 600 s"), "{err}");
    assert!(!sock.exists(), "the socket is removed at exit");
    std::fs::remove_dir_all(&d).unwrap();
}

/// The guest's first instruction already finds the main thread filtered:
/// the vCPUs enter the guest only once the main thread's filter is in
/// place. The guest writes a byte to COM1 before anything else; when that
/// byte reaches the VMM's stdout, the main thread's task status must say
/// seccomp mode 2 (filter). (Before, the vCPUs ran the guest while the
/// main thread still set up the API socket unfiltered.)
#[test]
fn the_guest_starts_only_after_the_main_thread_is_filtered() {
    if !kvm_usable() {
        eprintln!("no usable /dev/kvm: skipped");
        return;
    }
    use std::io::Read;
    let d = scratch("first-byte");
    // mov dx, 0x3f8; mov al, 'X'; out dx, al (then the payload's hlt)
    let k = kernel(
        &d,
        "first-byte",
        &[0x66, 0xba, 0xf8, 0x03, 0xb0, b'X', 0xee],
    );
    let sock = d.join("api.sock");
    let mut child = command(&k, &sock, &[])
        .stdout(Stdio::piped())
        .spawn()
        .expect("run vmm");
    let pid = child.id();
    let mut out = child.stdout.take().unwrap();
    let mut byte = [0u8; 1];
    let got = out.read_exact(&mut byte);
    // Read at once: any later and the main thread would have had its
    // time to finish the setup whatever the order.
    let status = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/status"));
    let mode = status
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("Seccomp:"))
        .unwrap_or("")
        .to_string();
    let pid_t = i32::try_from(pid).unwrap();
    // SAFETY: our child's pid.
    unsafe { libc::kill(pid_t, libc::SIGTERM) };
    drop(out);
    let (code, err) = wait(child);
    assert!(
        got.is_ok() && byte == *b"X",
        "no byte from the guest; {err}"
    );
    assert_eq!(
        mode, "Seccomp:\t2",
        "the main thread's seccomp mode when the guest's first byte came out; {err}"
    );
    assert_eq!(code, Some(143), "{err}");
    std::fs::remove_dir_all(&d).unwrap();
}
