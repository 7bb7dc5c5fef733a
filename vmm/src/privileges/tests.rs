use super::*;

/// A fake /proc: each (pid, Name, Uid line).
fn fake_proc(tag: &str, procs: &[(u32, &str, &str)]) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("vmm-proc-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    for (pid, name, uid) in procs {
        let p = d.join(pid.to_string());
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(
            p.join("status"),
            format!("Name:\t{name}\nUmask:\t0022\nState:\tS (sleeping)\nUid:\t{uid}\nGid:\t0\t0\t0\t0\n"),
        )
        .unwrap();
    }
    std::fs::create_dir_all(d.join("self")).unwrap();
    std::fs::write(d.join("cpuinfo"), "").unwrap();
    d
}

#[test]
fn finds_the_other_processes_of_a_uid() {
    let d = fake_proc(
        "find",
        &[
            (10, "vmm", "1000\t1000\t1000\t1000"),
            (11, "sshd", "0\t0\t0\t0"),
            (12, "setuid-thing", "0\t1000\t0\t1000"),
            (13, "dropped", "0\t0\t1000\t0"),
            (99, "me", "1000\t1000\t1000\t1000"),
            (14, "fs-only", "0\t0\t0\t1000"),
        ],
    );
    let got = processes_with_uid(&d, 1000, 99);
    let pids: Vec<u32> = got.iter().map(|p| p.pid).collect();
    assert_eq!(
        pids,
        vec![10, 12, 13],
        "real, effective or saved; not itself"
    );
    assert_eq!(got[0].name, "vmm");
    assert!(processes_with_uid(&d, 2000, 99).is_empty());
    assert!(processes_with_uid(&d.join("missing"), 1000, 99).is_empty());
    std::fs::remove_dir_all(&d).unwrap();
}

/// One warning when another process runs as the `--user` uid, none
/// when the uid is this VM's alone.
#[test]
fn a_shared_user_is_warned_about() {
    use viommu_device::testing::count_warnings;
    let d = fake_proc(
        "warn",
        &[
            (10, "vmm", "4242\t4242\t4242\t4242"),
            (11, "init", "0\t0\t0\t0"),
        ],
    );
    let ids = |uid| Ids { uid, gid: uid };
    let mut n = 0;
    assert_eq!(count_warnings(|| n = warn_if_uid_shared(&d, ids(4242))), 1);
    assert_eq!(n, 1);
    assert_eq!(count_warnings(|| n = warn_if_uid_shared(&d, ids(4243))), 0);
    assert_eq!(n, 0);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn parses_numeric_ids() {
    assert_eq!(
        "65534".parse(),
        Ok(Ids {
            uid: 65534,
            gid: 65534
        })
    );
    assert_eq!(
        "1000:100".parse(),
        Ok(Ids {
            uid: 1000,
            gid: 100
        })
    );
    assert!("nobody"
        .parse::<Ids>()
        .unwrap_err()
        .contains("not a number"));
    assert!("0".parse::<Ids>().unwrap_err().contains("root"));
}

#[test]
fn a_thread_drops_only_itself() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root");
        return;
    }
    let ids = Ids {
        uid: 65534,
        gid: 65534,
    };
    let t = std::thread::spawn(move || {
        drop_thread_to(ids).unwrap();
        // SAFETY: plain credential reads.
        let (u, g) = unsafe {
            (
                libc::syscall(libc::SYS_getuid),
                libc::syscall(libc::SYS_getgid),
            )
        };
        // Root is gone for good: setting it back fails.
        // SAFETY: a raw credential call on this thread only.
        let back = unsafe { libc::syscall(libc::SYS_setresuid, 0, 0, 0) };
        (u, g, back)
    });
    assert_eq!(t.join().unwrap(), (65534, 65534, -1));
    // SAFETY: as above.
    let me = unsafe { libc::syscall(libc::SYS_geteuid) };
    assert_eq!(me, 0, "this thread is still root");
}
