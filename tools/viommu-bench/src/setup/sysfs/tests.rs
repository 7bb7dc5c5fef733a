use super::*;

#[test]
fn paths_are_under_the_root() {
    let r = Root::new("/tmp/fake");
    assert_eq!(
        r.path("/sys/bus/pci"),
        PathBuf::from("/tmp/fake/sys/bus/pci")
    );
    assert_eq!(
        r.path("proc/mounts"),
        PathBuf::from("/tmp/fake/proc/mounts")
    );
    let real = Root::new("/");
    assert_eq!(real.path("/dev/kvm"), PathBuf::from("/dev/kvm"));
}

#[test]
fn missing_dir_lists_empty() {
    let d = tempfile::tempdir().unwrap();
    assert!(Root::new(d.path()).list("/nope").is_empty());
}
