//! The huge page pool check on fake sysfs trees.
use super::super::tests::Fake;
use super::*;

/// The fake host's 2 MiB pool.
fn pool(f: &Fake, total: u64, free: u64, reserved: u64) {
    let d = POOL_DIR.trim_start_matches('/');
    f.file(&format!("{d}/nr_hugepages"), &format!("{total}\n"));
    f.file(&format!("{d}/free_hugepages"), &format!("{free}\n"));
    f.file(&format!("{d}/resv_hugepages"), &format!("{reserved}\n"));
}

fn hugepage_checks(f: &Fake) -> Checks {
    Checks {
        hugepages: true,
        ..f.checks()
    }
}

#[test]
fn one_guests_ram_in_free_pages_passes() {
    let f = Fake::healthy();
    // A 1 GiB guest: 512 pages, exactly what is free.
    pool(&f, 600, 512, 0);
    assert!(hugepage_checks(&f).run().problems.is_empty());
    // Without --hugepages the pool is not looked at.
    let f = Fake::healthy();
    assert!(f.checks().run().problems.is_empty());
}

#[test]
fn too_few_pages_are_one_line_with_the_numbers_and_the_command() {
    let f = Fake::healthy();
    // 520 free, 20 of them promised to another mapping: 500 usable.
    pool(&f, 600, 520, 20);
    let line = f.only_problem(&hugepage_checks(&f));
    assert!(
        line.contains("needs 512 free 2 MiB huge pages, the host has 500")
            && line.contains("nr_hugepages 600, free 520, reserved 20, overcommit 0, surplus 0")
            && line.contains("echo 612 > /proc/sys/vm/nr_hugepages"),
        "{line}"
    );
    assert!(!line.contains('\n'));
    // None reserved at all: ask for the guest's pages.
    let f = Fake::healthy();
    pool(&f, 0, 0, 0);
    let c = Checks {
        guest_memory: 2 << 30,
        ..hugepage_checks(&f)
    };
    let line = f.only_problem(&c);
    assert!(
        line.contains("one 2048 MiB guest at a time needs 1024")
            && line.contains("echo 1024 > /proc/sys/vm/nr_hugepages"),
        "{line}"
    );
}

#[test]
fn a_kernel_without_hugetlbfs_is_named() {
    let f = Fake::healthy();
    let line = f.only_problem(&hugepage_checks(&f));
    assert!(
        line.contains("no 2 MiB huge pages") && line.contains("CONFIG_HUGETLBFS"),
        "{line}"
    );
    assert_eq!(HugePool::read(&Root::new(f.p(""))), None);
    pool(&f, 8, 6, 2);
    assert_eq!(
        HugePool::read(&Root::new(f.p(""))),
        Some(HugePool {
            total: 8,
            free: 6,
            reserved: 2,
            overcommit: 0,
            surplus: 0
        })
    );
    assert_eq!(HugePool::read(&Root::new(f.p(""))).unwrap().available(), 4);
}

#[test]
fn overcommit_room_counts_as_available() {
    // 100 usable in the pool, overcommit 500 of which 50 are in use: 550.
    let f = Fake::healthy();
    pool(&f, 200, 100, 0);
    let d = POOL_DIR.trim_start_matches('/');
    f.file(&format!("{d}/nr_overcommit_hugepages"), "500\n");
    f.file(&format!("{d}/surplus_hugepages"), "50\n");
    assert_eq!(
        HugePool::read(&Root::new(f.p(""))).unwrap().available(),
        550
    );
    assert!(hugepage_checks(&f).run().problems.is_empty());
    // Overcommit used up: only the pool's 100, one line with both numbers.
    f.file(&format!("{d}/surplus_hugepages"), "500\n");
    let line = f.only_problem(&hugepage_checks(&f));
    assert!(
        line.contains("the host has 100") && line.contains("overcommit 500, surplus 500"),
        "{line}"
    );
}
