use super::*;
use std::os::unix::fs::symlink;

#[test]
fn mountinfo_lines() {
    let m = parse_mountinfo(
        "36 35 259:2 / /mnt/my\\040data rw,noatime shared:1 - ext4 /dev/nvme0n1p2 rw\n\
         40 35 0:45 / / rw master:1 - btrfs /dev/sda2 rw,ssd\n",
    );
    assert_eq!(m.len(), 2);
    assert_eq!(m[0].dev, "259:2");
    assert_eq!(m[0].at, "/mnt/my data");
    assert_eq!(m[0].source, "/dev/nvme0n1p2");
    assert_eq!((m[1].fstype.as_str(), m[1].at.as_str()), ("btrfs", "/"));
}

#[test]
fn one_process_per_mount_namespace_and_the_dev_fds() {
    let d = tempfile::tempdir().unwrap();
    let p = |rel: &str| d.path().join(rel);
    for (pid, ns) in [("1", "mnt:[1]"), ("50", "mnt:[2]"), ("51", "mnt:[2]")] {
        std::fs::create_dir_all(p(&format!("proc/{pid}/ns"))).unwrap();
        symlink(ns, p(&format!("proc/{pid}/ns/mnt"))).unwrap();
        std::fs::write(p(&format!("proc/{pid}/comm")), format!("c{pid}\n")).unwrap();
        std::fs::write(
            p(&format!("proc/{pid}/mountinfo")),
            format!("1 0 8:1 / /{pid} rw - ext4 /dev/sda1 rw\n"),
        )
        .unwrap();
    }
    std::fs::create_dir_all(p("proc/self/ns")).unwrap();
    symlink("mnt:[1]", p("proc/self/ns/mnt")).unwrap();
    let r = Root::new(d.path());
    let (own, ns) = mount_namespaces(&r);
    assert_eq!(own.as_deref(), Some("mnt:[1]"));
    assert_eq!(ns.len(), 2);
    let (proc, mounts) = &ns["mnt:[2]"];
    assert_eq!(proc.to_string(), "pid 50 (c50)");
    assert_eq!(mounts[0].at, "/50");
    std::fs::create_dir_all(p("proc/51/fd")).unwrap();
    symlink("/dev/nvme0n1", p("proc/51/fd/7")).unwrap();
    symlink("/dev/nvme0n1", p("proc/51/fd/8")).unwrap();
    symlink("socket:[99]", p("proc/51/fd/9")).unwrap();
    let fds = dev_fds(&r);
    assert_eq!(fds.len(), 1);
    assert_eq!(fds["/dev/nvme0n1"][0].to_string(), "pid 51 (c51)");
}
