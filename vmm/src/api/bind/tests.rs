use std::os::unix::fs::{FileTypeExt, PermissionsExt};

use super::*;

fn dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("vmm-bind-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn the_socket_appears_private_owned_and_alone() {
    let d = dir("owned");
    // A directory anyone may write, as /tmp.
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let path = d.join("api.sock");
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let owner = root.then_some(Ids {
        uid: 54321,
        gid: 54322,
    });
    let (l, entry) = bind_private(&path, owner).unwrap();
    let m = std::fs::symlink_metadata(&path).unwrap();
    assert!(m.file_type().is_socket());
    assert_eq!(m.mode() & 0o777, 0o600);
    if root {
        assert_eq!((m.uid(), m.gid()), (54321, 54322));
    }
    // Nothing else is left in the directory.
    let names: Vec<_> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("api.sock")]);
    // It is the listening socket.
    let _c = std::os::unix::net::UnixStream::connect(&path).unwrap();
    assert!(l.accept().is_ok());
    // Dropping the entry removes it.
    drop(entry);
    assert!(std::fs::symlink_metadata(&path).is_err());
    std::fs::remove_dir_all(&d).unwrap();
}

/// Whatever took the socket's place by exit time is left alone.
#[test]
fn only_the_socket_bound_is_removed() {
    let d = dir("replaced");
    let path = d.join("api.sock");
    let (_l, entry) = bind_private(&path, None).unwrap();
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, b"someone else's").unwrap();
    assert!(entry.remove().is_err());
    drop(entry);
    assert_eq!(std::fs::read(&path).unwrap(), b"someone else's");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_symlink_at_the_path_is_neither_followed_nor_replaced() {
    let d = dir("link");
    let victim = d.join("victim");
    std::fs::write(&victim, b"x").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
    let path = d.join("api.sock");
    std::os::unix::fs::symlink(&victim, &path).unwrap();
    let owner = Some(Ids {
        uid: 54321,
        gid: 54321,
    });
    let e = bind_private(&path, owner).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::AlreadyExists, "{e}");
    let v = std::fs::metadata(&victim).unwrap();
    assert_eq!(v.mode() & 0o777, 0o644);
    assert_ne!(v.uid(), 54321);
    assert!(std::fs::symlink_metadata(&path)
        .unwrap()
        .file_type()
        .is_symlink());
    // Nothing left behind but the two.
    assert_eq!(std::fs::read_dir(&d).unwrap().count(), 2);
    std::fs::remove_dir_all(&d).unwrap();
}
