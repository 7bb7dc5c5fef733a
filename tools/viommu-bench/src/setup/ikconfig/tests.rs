use std::io::Write;

use super::*;

const CONFIG: &str = "#\n# Automatically generated file; DO NOT EDIT.\n#\nCONFIG_64BIT=y\nCONFIG_VIRTIO_IOMMU=y\nCONFIG_BLK_DEV_NVME=m\n";

/// Kernel-like bytes: x86 call opcodes (0xe8) followed by small
/// offsets, which the xz BCJ filter rewrites, and noise.
fn filler(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed;
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        let b = (x >> 24) as u8;
        if b < 16 {
            v.extend_from_slice(&[0xe8, b, 0x10, 0, 0]);
        } else {
            v.push(b % 7);
        }
    }
    v.truncate(len);
    v
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// A vmlinux with the config embedded `at` bytes in (none: no IKCONFIG).
fn vmlinux(config: Option<&str>, at: usize) -> Vec<u8> {
    let mut v = b"\x7fELF".to_vec();
    v.extend(filler(at - 4, 1));
    if let Some(c) = config {
        v.extend_from_slice(b"IKCFG_ST");
        v.extend(gzip(c.as_bytes()));
        v.extend_from_slice(b"IKCFG_ED");
    }
    v.extend(filler(300_000, 2));
    v
}

fn xz(data: &[u8]) -> Vec<u8> {
    // As the kernel's scripts/xz_wrap.sh: --check=crc32 --x86 --lzma2.
    let mut o = lzma_rust2::XzOptions::with_preset(1);
    o.set_check_sum_type(lzma_rust2::CheckType::Crc32);
    o.prepend_pre_filter(lzma_rust2::FilterType::BcjX86, 0);
    let mut w = lzma_rust2::XzWriter::new(Vec::new(), o).unwrap();
    w.write_all(data).unwrap();
    w.finish().unwrap()
}

fn zstd(data: &[u8]) -> Vec<u8> {
    ruzstd::encoding::compress_to_vec(data, ruzstd::encoding::CompressionLevel::Fastest)
}

fn lz4_legacy(data: &[u8]) -> Vec<u8> {
    let mut v = LZ4_LEGACY_MAGIC.to_le_bytes().to_vec();
    for block in data.chunks(LZ4_LEGACY_BLOCK) {
        let c = lz4_flex::block::compress(block);
        v.extend((c.len() as u32).to_le_bytes());
        v.extend(c);
    }
    v
}

/// A bzImage around `payload` (protocol 2.15, 3 setup sectors), with
/// the uncompressed size appended as the kernel's size_append does.
fn bzimage(payload: &[u8], uncompressed: usize, size_append: bool) -> Vec<u8> {
    let mut payload = payload.to_vec();
    if size_append {
        payload.extend((uncompressed as u32).to_le_bytes());
    }
    let mut v = vec![0u8; 4 * 512];
    v[0x1f1] = 3;
    v[0x202..0x206].copy_from_slice(b"HdrS");
    v[0x206..0x208].copy_from_slice(&0x020fu16.to_le_bytes());
    let off = 0x3a0u32;
    v[0x248..0x24c].copy_from_slice(&off.to_le_bytes());
    v[0x24c..0x250].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    v.extend(filler(off as usize, 3));
    v.extend(payload);
    v.extend(filler(5000, 4));
    v
}

#[test]
fn the_config_is_read_from_every_payload_format() {
    let k = vmlinux(Some(CONFIG), 200_000);
    for (name, packed, sized) in [
        ("gzip", gzip(&k), false),
        ("xz", xz(&k), true),
        ("zstd", zstd(&k), true),
        ("lz4", lz4_legacy(&k), true),
    ] {
        let img = bzimage(&packed, k.len(), sized);
        // (lz4 keeps incompressible bytes as literals.)
        assert!(
            name == "lz4" || find(&img, b"IKCFG_ST").is_none(),
            "{name}: marker visible uncompressed"
        );
        assert_eq!(
            embedded_config(&img).unwrap().as_deref(),
            Some(CONFIG),
            "{name}"
        );
    }
}

#[test]
fn markers_across_a_chunk_boundary_and_a_raw_vmlinux() {
    // The start marker straddles the first 1 MiB read; then the end one.
    for at in [(1 << 20) - 4, (1 << 20) - 20] {
        let k = vmlinux(Some(CONFIG), at);
        assert_eq!(embedded_config(&k).unwrap().as_deref(), Some(CONFIG));
    }
    let k = vmlinux(Some(CONFIG), 100);
    let end = find(&k, b"IKCFG_ED").unwrap();
    let mut k2 = k.clone();
    k2.truncate(end + 4);
    let e = embedded_config(&k2).unwrap_err().to_string();
    assert!(e.contains("ends before IKCFG_ED"), "{e}");
}

#[test]
fn a_kernel_without_ikconfig_has_none() {
    let k = vmlinux(None, 200_000);
    assert_eq!(embedded_config(&k).unwrap(), None);
    assert_eq!(
        embedded_config(&bzimage(&xz(&k), k.len(), true)).unwrap(),
        None
    );
    assert_eq!(
        embedded_config(&bzimage(&lz4_legacy(&k), k.len(), true)).unwrap(),
        None
    );
    // Neither a bzImage nor a vmlinux with the markers.
    assert_eq!(embedded_config(b"bzImage").unwrap(), None);
}

#[test]
fn unread_formats_and_bad_headers_are_named() {
    let k = vmlinux(Some(CONFIG), 1000);
    let mut bz2 = b"BZh91AY&SY".to_vec();
    bz2.extend(filler(1000, 5));
    let e = embedded_config(&bzimage(&bz2, k.len(), true))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("bzip2 (CONFIG_KERNEL_BZIP2)") && e.contains("reads gzip, xz, zstd and lz4"),
        "{e}"
    );
    let e = embedded_config(&bzimage(&[0x5d, 0, 0, 0x80, 0], 0, true))
        .unwrap_err()
        .to_string();
    assert!(e.contains("lzma (CONFIG_KERNEL_LZMA)"), "{e}");
    // A payload cut short: xz's decoder says so.
    let mut packed = xz(&vmlinux(None, 1000));
    packed.truncate(packed.len() / 2);
    let e = embedded_config(&bzimage(&packed, k.len(), true))
        .unwrap_err()
        .to_string();
    assert!(e.contains("its xz payload does not decompress"), "{e}");
    // The header points past the file.
    let mut img = bzimage(&gzip(&k), k.len(), false);
    img.truncate(3000);
    let e = embedded_config(&img).unwrap_err().to_string();
    assert!(e.contains("past the file's 3000 bytes"), "{e}");
    let mut img = bzimage(&gzip(&k), k.len(), false);
    img[0x206..0x208].copy_from_slice(&0x0206u16.to_le_bytes());
    let e = embedded_config(&img).unwrap_err().to_string();
    assert!(e.contains("boot protocol 2.06"), "{e}");
}
