//! Giving up root once the VM is set up (`--user UID[:GID]`).
//!
//! What needs root is done by then: /dev/kvm, the VFIO group and container
//! are open, guest RAM is mapped, the API socket is bound. Every thread
//! then runs as the given user with no supplementary groups and no
//! capabilities (a uid change away from 0 clears them).
//!
//! Linux credentials belong to a thread, and glibc's `setuid` changes them
//! in every thread by signalling each one, whose seccomp filter would kill
//! the process for the call. So each thread drops its own credentials with
//! the raw system calls, before it installs its filter (in
//! [`crate::seccomp::spawn`]), and the main thread drops its own when the
//! setup is done. Threads started later inherit the dropped credentials.
//!
//! VFIO pins guest memory against `RLIMIT_MEMLOCK` once `CAP_IPC_LOCK` is
//! gone, so [`prepare`] lifts that limit first (root may).

use std::sync::OnceLock;

/// The user and group to run as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ids {
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

impl std::str::FromStr for Ids {
    type Err = String;

    /// `UID` (the group is the same number) or `UID:GID`, numeric: no
    /// user database is read.
    fn from_str(s: &str) -> Result<Self, String> {
        let num = |v: &str, what: &str| {
            v.parse::<u32>().map_err(|_| {
                format!("{what} {v:?} is not a number (give numeric ids, e.g. --user 65534:65534)")
            })
        };
        let (u, g) = s.split_once(':').unwrap_or((s, s));
        let ids = Ids {
            uid: num(u, "user id")?,
            gid: num(g, "group id")?,
        };
        if ids.uid == 0 {
            return Err("--user 0 is root: nothing would be dropped".into());
        }
        Ok(ids)
    }
}

static TARGET: OnceLock<Ids> = OnceLock::new();

/// Lift `RLIMIT_MEMLOCK` and record `ids` as what every thread drops to.
/// Call once, before any thread starts.
pub fn prepare(ids: Ids) -> std::io::Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(std::io::Error::other(
            "--user needs the VMM to start as root (it gives root up after the setup)",
        ));
    }
    let unlimited = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: a valid rlimit for this process.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    TARGET
        .set(ids)
        .map_err(|_| std::io::Error::other("--user applied twice"))
}

/// Drop the calling thread to the recorded ids, if any.
pub fn drop_this_thread() -> std::io::Result<()> {
    match TARGET.get() {
        Some(ids) => drop_thread_to(*ids),
        None => Ok(()),
    }
}

/// Drop the calling thread's credentials to `ids`: no supplementary
/// groups, then real, effective and saved group, then user. Checked after.
pub fn drop_thread_to(ids: Ids) -> std::io::Result<()> {
    let check = |rc: libc::c_long, what: &str| {
        if rc == 0 {
            Ok(())
        } else {
            let e = std::io::Error::last_os_error();
            Err(std::io::Error::new(e.kind(), format!("{what}: {e}")))
        }
    };
    let (uid, gid) = (libc::c_long::from(ids.uid), libc::c_long::from(ids.gid));
    // SAFETY: raw credential system calls on the calling thread; the
    // setgroups list is empty (a null pointer with size 0).
    unsafe {
        check(
            libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()),
            "setgroups",
        )?;
        check(
            libc::syscall(libc::SYS_setresgid, gid, gid, gid),
            "setresgid",
        )?;
        check(
            libc::syscall(libc::SYS_setresuid, uid, uid, uid),
            "setresuid",
        )?;
    }
    // SAFETY: plain credential reads of the calling thread.
    let (u, g) = unsafe {
        (
            libc::syscall(libc::SYS_geteuid),
            libc::syscall(libc::SYS_getegid),
        )
    };
    if (u, g) != (uid, gid) {
        return Err(std::io::Error::other(format!(
            "credentials are {u}:{g} after dropping to {uid}:{gid}"
        )));
    }
    Ok(())
}

/// A process other than this one that runs with a given uid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UidSharer {
    /// Its pid.
    pub pid: u32,
    /// Its command name (`/proc/PID/comm`, from the status file).
    pub name: String,
}

/// The processes under `proc_root` (`/proc`) other than `me` whose real,
/// effective or saved uid is `uid` (the `Uid:` line of their status file),
/// in pid order. Processes that vanish while being read are skipped.
pub fn processes_with_uid(proc_root: &std::path::Path, uid: u32, me: u32) -> Vec<UidSharer> {
    let Ok(dir) = std::fs::read_dir(proc_root) else {
        return Vec::new();
    };
    let mut found: Vec<UidSharer> = dir
        .filter_map(|e| {
            let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
            if pid == me {
                return None;
            }
            let status =
                std::fs::read_to_string(proc_root.join(pid.to_string()).join("status")).ok()?;
            let field = |key: &str| status.lines().find_map(|l| l.strip_prefix(key));
            let uids = field("Uid:")?;
            let shares = uids
                .split_whitespace()
                .take(3)
                .any(|u| u.parse::<u32>() == Ok(uid));
            shares.then(|| UidSharer {
                pid,
                name: field("Name:").unwrap_or("").trim().to_string(),
            })
        })
        .collect();
    found.sort_by_key(|p| p.pid);
    found
}

/// `--user` is one VM's own: every process of that uid may signal and
/// trace this VMM and use its API socket (the kernel and the socket's
/// peer check see only the uid). Warns, once, naming a few processes
/// that already run with it; returns how many there are.
pub fn warn_if_uid_shared(proc_root: &std::path::Path, ids: Ids) -> usize {
    let others = processes_with_uid(proc_root, ids.uid, std::process::id());
    if !others.is_empty() {
        let names: Vec<String> = others
            .iter()
            .take(3)
            .map(|p| format!("{} ({})", p.pid, p.name))
            .collect();
        tracing::warn!(
            uid = ids.uid,
            processes = others.len(),
            "--user {} is shared: {}{} already run as that uid and may drive this VM's API, signal or trace it; give each VM a uid of its own",
            ids.uid,
            names.join(", "),
            if others.len() > 3 { ", ..." } else { "" }
        );
    }
    others.len()
}

#[cfg(test)]
mod tests;
