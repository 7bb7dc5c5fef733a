use std::os::fd::AsRawFd;

use viommu_device::testing::{count_warnings, warning_budget};

use super::*;

fn file(bytes: &[u8]) -> std::fs::File {
    let path = std::env::temp_dir().join(format!(
        "vmm-region-test-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::write(&path, bytes).unwrap();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    f
}

const RW: u32 = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;

#[test]
fn accesses_inside_the_region_reach_the_file_at_its_offset() {
    let f = file(&(0..=255u8).collect::<Vec<_>>());
    let r = Region {
        offset: 0x80,
        size: 0x40,
        flags: RW,
    };
    let mut b = [0u8; 4];
    read(f.as_raw_fd(), 0, r, &mut b, 0x3c);
    assert_eq!(b, [0xbc, 0xbd, 0xbe, 0xbf]);
    write(f.as_raw_fd(), 0, r, &[1, 2], 0x10);
    read(f.as_raw_fd(), 0, r, &mut b, 0x10);
    assert_eq!(b, [1, 2, 0x92, 0x93]);
}

#[test]
fn accesses_the_region_cannot_take_are_refused_and_logged_within_the_limit() {
    let f = file(&[0xaa; 0x200]);
    // A conventional function's config space: 256 bytes; the guest
    // reads and writes extended config space (up to 4 KiB) in a loop.
    let r = Region {
        offset: 0,
        size: 0x100,
        flags: RW,
    };
    let start = std::time::Instant::now();
    let n = count_warnings(|| {
        for i in 0..10_000u64 {
            let mut b = [0x55u8; 4];
            read(f.as_raw_fd(), 7, r, &mut b, 0x100 + (i % 0xf00));
            assert_eq!(b, [0x55; 4], "nothing read past the region");
            write(f.as_raw_fd(), 7, r, &[0; 4], 0xfe + (i % 2));
            // And a region without the access flag.
            let ro = Region {
                flags: VFIO_REGION_INFO_FLAG_READ,
                ..r
            };
            write(f.as_raw_fd(), 7, ro, &[0; 4], 0);
            let no = Region { flags: 0, ..r };
            read(f.as_raw_fd(), 9, no, &mut b, 0);
        }
    });
    assert!(
        n <= warning_budget(start.elapsed().as_secs()),
        "{n} warnings"
    );
    let mut b = [0u8; 4];
    read(f.as_raw_fd(), 7, r, &mut b, 0xfc);
    assert_eq!(b, [0xaa; 4], "no write reached the file");
    assert_eq!(r.file_offset(u64::MAX, 4, RW), None, "no overflow");
}
