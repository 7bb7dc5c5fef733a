//! Creating the API socket so that nobody can make us change the mode or
//! owner of anything else: the VMM runs as root while it does this, and
//! the socket's directory may be writable by others.
//!
//! The socket is bound in a fresh directory of ours (mode 0700, made in
//! the target's directory and checked by descriptor), under a umask that
//! gives it mode 0600 from its first instant; it is handed to `--user`
//! there (`fchownat` relative to that directory's descriptor, not
//! following links: nobody else can put anything in it), and only then
//! renamed to its path with `RENAME_NOREPLACE` (which replaces nothing,
//! a planted symlink included). No `chmod` or `chown` ever resolves a path
//! someone else can write.
//!
//! The socket is removed the same way at exit ([`SocketEntry`]): through
//! the descriptor of its directory, opened when it was bound, and only if
//! the entry still is that socket.

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::privileges::Ids;

/// The socket's name inside the private directory.
const INNER: &str = "s";

fn cstr(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

fn check(r: libc::c_int) -> io::Result<()> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn open_dir(at: libc::c_int, name: &CString) -> io::Result<File> {
    // SAFETY: `name` is a valid C string; the returned fd is owned by the
    // File below.
    let fd = unsafe {
        libc::openat(
            at,
            name.as_ptr(),
            libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_RDONLY,
        )
    };
    check(fd)?;
    // SAFETY: `fd` was just opened and is owned by nobody else.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// The process umask set for the life of the value.
struct Umask(libc::mode_t);

impl Umask {
    fn set(mask: libc::mode_t) -> Umask {
        // SAFETY: umask cannot fail.
        Umask(unsafe { libc::umask(mask) })
    }
}

impl Drop for Umask {
    fn drop(&mut self) {
        // SAFETY: umask cannot fail.
        unsafe { libc::umask(self.0) };
    }
}

/// The bound socket's entry in its directory, held by the directory's
/// descriptor: dropping it removes the socket (if the entry still is the
/// socket that was bound: same inode), without resolving a path again.
/// The main thread's seccomp filter allows unlinking in this directory
/// only ([`Self::dir_fd`]).
#[derive(Debug)]
pub struct SocketEntry {
    dir: File,
    name: CString,
    ino: u64,
}

impl SocketEntry {
    /// The descriptor of the socket's directory.
    pub fn dir_fd(&self) -> RawFd {
        self.dir.as_raw_fd()
    }

    /// Removes the socket, unless its entry is no longer the socket bound
    /// (then nothing is removed: somebody else's file).
    pub fn remove(&self) -> io::Result<()> {
        // SAFETY: a zeroed stat is a valid out-buffer, `name` a valid C
        // string; fstatat writes only `st`.
        let st = unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            check(libc::fstatat(
                self.dir.as_raw_fd(),
                self.name.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            ))?;
            st
        };
        if st.st_ino != self.ino || st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
            return Err(io::Error::other("the socket's path holds another file now"));
        }
        // SAFETY: `name` is a valid C string.
        check(unsafe { libc::unlinkat(self.dir.as_raw_fd(), self.name.as_ptr(), 0) })
    }
}

impl Drop for SocketEntry {
    fn drop(&mut self) {
        if let Err(e) = self.remove() {
            tracing::debug!("API socket not removed: {e}");
        }
    }
}

/// Binds a Unix socket at `path` with mode 0600, owned by `owner` if
/// given (else by us), see the module doc. Nothing may be at `path`.
/// Dropping the [`SocketEntry`] removes it again.
pub fn bind_private(
    path: &Path,
    owner: Option<Ids>,
) -> io::Result<(std::os::unix::net::UnixListener, SocketEntry)> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let parent = open_dir(libc::AT_FDCWD, &cstr(parent.as_os_str())?)?;
    // A fresh directory of ours next to the target (rename needs the same
    // filesystem); mkdirat fails on anything already there.
    let mut tmp = None;
    for i in 0..100u32 {
        let t = cstr(OsStr::new(&format!(
            ".{}.{}.{i}",
            name.to_string_lossy(),
            std::process::id()
        )))?;
        // SAFETY: `t` is a valid C string.
        match check(unsafe { libc::mkdirat(parent.as_raw_fd(), t.as_ptr(), 0o700) }) {
            Ok(()) => {
                tmp = Some(t);
                break;
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    let tmp = tmp.ok_or_else(|| io::Error::from(io::ErrorKind::AlreadyExists))?;
    let r = bind_in(&parent, &tmp, name, owner);
    // SAFETY: `tmp` is a valid C string; the directory is ours, and empty
    // unless an error left the socket in it (removed first).
    unsafe {
        if r.is_err() {
            let inner = cstr(OsStr::new(INNER))?;
            if let Ok(d) = open_dir(parent.as_raw_fd(), &tmp) {
                libc::unlinkat(d.as_raw_fd(), inner.as_ptr(), 0);
            }
        }
        libc::unlinkat(parent.as_raw_fd(), tmp.as_ptr(), libc::AT_REMOVEDIR);
    }
    let (listener, ino) = r?;
    let entry = SocketEntry {
        dir: parent,
        name: cstr(name)?,
        ino,
    };
    Ok((listener, entry))
}

/// The listener and the socket file's inode.
fn bind_in(
    parent: &File,
    tmp: &CString,
    name: &OsStr,
    owner: Option<Ids>,
) -> io::Result<(std::os::unix::net::UnixListener, u64)> {
    let dir = open_dir(parent.as_raw_fd(), tmp)?;
    // It must be the directory we made: ours, nobody else's to write.
    let m = dir.metadata()?;
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    if m.uid() != me || m.mode() & 0o077 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "the private directory for the socket was replaced",
        ));
    }
    // Through the directory's descriptor: no path component anyone else
    // controls is resolved.
    let at = format!("/proc/self/fd/{}/{INNER}", dir.as_raw_fd());
    let listener = {
        let _mask = Umask::set(0o177);
        std::os::unix::net::UnixListener::bind(&at)?
    };
    let inner = cstr(OsStr::new(INNER))?;
    // The mode set explicitly: the umask above is process-wide, so another
    // thread's umask change (tests binding in parallel did) can come
    // between it and the bind. Nobody else can reach the socket before
    // this: the directory is ours alone (checked above).
    // SAFETY: `inner` is a valid C string.
    check(unsafe { libc::fchmodat(dir.as_raw_fd(), inner.as_ptr(), 0o600, 0) })?;
    if let Some(ids) = owner {
        // SAFETY: `inner` is a valid C string.
        check(unsafe {
            libc::fchownat(
                dir.as_raw_fd(),
                inner.as_ptr(),
                ids.uid,
                ids.gid,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        })?;
    }
    // Its inode, which the rename keeps: what `SocketEntry::remove` checks.
    // SAFETY: a zeroed stat is a valid out-buffer, `inner` a valid C
    // string; fstatat writes only `st`.
    let ino = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        check(libc::fstatat(
            dir.as_raw_fd(),
            inner.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        ))?;
        st.st_ino
    };
    let target = cstr(name)?;
    // SAFETY: both names are valid C strings.
    check(unsafe {
        libc::renameat2(
            dir.as_raw_fd(),
            inner.as_ptr(),
            parent.as_raw_fd(),
            target.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    })?;
    Ok((listener, ino))
}

#[cfg(test)]
mod tests;
