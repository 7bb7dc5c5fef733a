//! The programs the run needs on the host: QEMU, our VMM, fio (with its
//! libaio engine), busybox and ldd.
use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::{problem, Checks, Outcome};
use crate::setup::host::{Pkg, PkgManager};

/// `prog` as an executable file: a path if it has a `/`, else looked up in `path_env`.
pub fn find_program(prog: &Path, path_env: Option<&OsStr>) -> Option<PathBuf> {
    let executable = |p: &Path| {
        p.metadata()
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if prog.components().count() > 1 || prog.is_absolute() {
        return executable(prog).then(|| prog.to_path_buf());
    }
    std::env::split_paths(path_env?)
        .map(|d| d.join(prog))
        .find(|p| executable(p))
}

/// Why `fio --enghelp=libaio` says `fio` has no libaio engine; `None` when it has.
pub(super) fn libaio_missing(fio: &Path) -> Option<String> {
    let out = crate::setup::exec::output(
        std::process::Command::new(fio)
            .arg("--enghelp=libaio")
            .stdin(std::process::Stdio::null()),
    );
    match out {
        Ok(o) if o.status.success() => None,
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            let first = err.lines().next().unwrap_or("").trim();
            Some(format!(
                "fio --enghelp=libaio exited {}{}",
                o.status.code().unwrap_or(-1),
                if first.is_empty() {
                    String::new()
                } else {
                    format!(": {first}")
                }
            ))
        }
        Err(e) => Some(format!("fio --enghelp=libaio: {e}")),
    }
}

impl Checks {
    pub(super) fn check_programs(&self, out: &mut Outcome) {
        let path = self.path_env.as_deref();
        let pm = PkgManager::detect(&self.root);
        if let Some(q) = &self.qemu {
            out.tools.qemu = find_program(q, path);
            if out.tools.qemu.is_none() {
                out.problems.push(problem(
                    format!("stock QEMU {}: not found", q.display()),
                    format!("{} (or pass --qemu PATH)", pm.install(Pkg::Qemu)),
                ));
            }
        }
        if let Some(v) = &self.vmm {
            out.tools.vmm = find_program(v, path);
            if out.tools.vmm.is_none() {
                out.problems.push(problem(
                    format!("our VMM {}: not found", v.display()),
                    "cargo build --release -p vmm and pass --vmm target/release/vmm",
                ));
            }
        }
        if self.build_image {
            out.tools.fio = find_program(Path::new("fio"), path);
            match &out.tools.fio {
                None => out.problems.push(problem(
                    "fio: not found (the guest image is built from the host's fio)",
                    format!("{} (or pass --initramfs PATH)", pm.install(Pkg::Fio)),
                )),
                // The guest runs fio's libaio engine; a fio with run-time
                // loaded engines may lack it (Fedora packages each apart).
                Some(fio) => {
                    if let Some(why) = libaio_missing(fio) {
                        out.problems.push(problem(
                            format!(
                                "{}: no libaio engine ({why}); every guest's fio would fail",
                                fio.display()
                            ),
                            format!("{} (or pass --initramfs PATH)", pm.install(Pkg::FioLibaio)),
                        ));
                    }
                }
            }
            out.tools.busybox = find_program(Path::new("busybox"), path);
            if out.tools.busybox.is_none() {
                out.problems.push(problem(
                    "busybox: not found (the guest image is built from the host's busybox)",
                    format!("{} (or pass --initramfs PATH)", pm.install(Pkg::Busybox)),
                ));
            }
            if find_program(Path::new("ldd"), path).is_none() {
                out.problems.push(problem(
                    "ldd: not found (it lists fio's libraries for the guest image)",
                    format!("{} (or pass --initramfs PATH)", pm.install(Pkg::Ldd)),
                ));
            }
        }
    }
}
