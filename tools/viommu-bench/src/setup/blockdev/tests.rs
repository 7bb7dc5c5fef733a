use super::*;
use std::os::unix::fs::PermissionsExt;

/// A device's first 256 KiB carrying a ZFS label of pool `pool`: the
/// nvlist's `name` pair at 16 KiB, an uberblock at 128 KiB.
pub(crate) fn zfs_label(pool: &str) -> Vec<u8> {
    let mut v = vec![0u8; 256 << 10];
    let mut nv = b"\0\0\0\x04name\0\0\0\x09\0\0\0\x01".to_vec();
    nv.extend((pool.len() as u32).to_be_bytes());
    nv.extend(pool.as_bytes());
    v[(16 << 10) + 40..(16 << 10) + 40 + nv.len()].copy_from_slice(&nv);
    v[(128 << 10) + 3072..(128 << 10) + 3080].copy_from_slice(&ZFS_UBERBLOCK_MAGIC.to_le_bytes());
    v
}

#[test]
fn the_own_probe_knows_zfs_labels_and_common_filesystems() {
    assert_eq!(
        own_probe(&zfs_label("rpool")),
        Some(("zfs_member".into(), Some("rpool".into())))
    );
    // Big-endian uberblocks too.
    let mut be = vec![0u8; 256 << 10];
    be[128 << 10..(128 << 10) + 8].copy_from_slice(&ZFS_UBERBLOCK_MAGIC.to_be_bytes());
    assert_eq!(own_probe(&be), Some(("zfs_member".into(), None)));
    let mut ext4 = vec![0u8; 256 << 10];
    ext4[1080..1082].copy_from_slice(&[0x53, 0xef]);
    ext4[1144..1148].copy_from_slice(b"root");
    assert_eq!(own_probe(&ext4), Some(("ext4".into(), Some("root".into()))));
    assert_eq!(own_probe(&vec![0u8; 256 << 10]), None);
    assert_eq!(own_probe(&[]), None);
}

#[test]
fn blkid_export_and_sizes() {
    assert_eq!(
        parse_blkid_export(
            "DEVNAME=/dev/nvme0n1p3\nLABEL=rpool\nUUID=123\nTYPE=zfs_member\nUSAGE=filesystem\n"
        ),
        (Some("zfs_member".into()), Some("rpool".into()))
    );
    assert_eq!(parse_blkid_export("PTTYPE=gpt\n"), (None, None));
    assert_eq!(human_bytes(512), "512B");
    assert_eq!(human_bytes(1 << 30), "1G");
    assert_eq!(human_bytes(1_000_204_886_016), "931.5G");
}

#[test]
fn a_device_is_probed_with_blkid_when_there_is_one() {
    let d = tempfile::tempdir().unwrap();
    let r = Root::new(d.path());
    std::fs::create_dir_all(d.path().join("dev")).unwrap();
    std::fs::write(d.path().join("dev/nvme0n1p1"), vec![0u8; 4096]).unwrap();
    let blkid = d.path().join("blkid");
    std::fs::write(
        &blkid,
        "#!/bin/sh\ncase \"$4\" in */nvme0n1p1) printf 'TYPE=vfat\\nLABEL=EFI\\n';; *) exit 2;; esac\n",
    )
    .unwrap();
    std::fs::set_permissions(&blkid, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut dev = BlockDev {
        name: "nvme0n1p1".into(),
        bytes: Some(512 << 20),
        ..Default::default()
    };
    probe(&r, &mut dev, Some(&blkid));
    assert_eq!(describe(&dev), "nvme0n1p1 512M vfat \"EFI\"");
    // blkid finds nothing: no signature.
    let mut other = BlockDev {
        name: "nvme0n1p2".into(),
        ..Default::default()
    };
    probe(&r, &mut other, Some(&blkid));
    assert_eq!(
        describe(&other),
        "nvme0n1p2 size unknown no filesystem signature"
    );
    // No blkid and no readable device: unknown.
    let mut gone = BlockDev {
        name: "nvme0n1p9".into(),
        ..Default::default()
    };
    probe(&r, &mut gone, None);
    assert_eq!(gone.fstype.as_deref(), Some("unknown"));
}
