use std::io::Write;

use super::*;
use crate::columns::Iommu;
use crate::setup::preflight::guest_kernel::{config_with_guest_options, kernel_gaps};

const DEP: &str = "\
kernel/drivers/nvme/host/nvme.ko.xz: kernel/drivers/nvme/host/nvme-core.ko.xz kernel/drivers/nvme/common/nvme-auth.ko.xz
kernel/drivers/nvme/host/nvme-core.ko.xz: kernel/drivers/nvme/common/nvme-auth.ko.xz
kernel/drivers/nvme/common/nvme-auth.ko.xz:
kernel/drivers/iommu/virtio-iommu.ko.zst: kernel/drivers/virtio/virtio.ko
kernel/drivers/virtio/virtio.ko:
kernel/drivers/block/virtio_blk.ko.gz: kernel/drivers/virtio/virtio.ko
";

fn xz(data: &[u8]) -> Vec<u8> {
    let mut o = lzma_rust2::XzOptions::with_preset(1);
    o.set_check_sum_type(lzma_rust2::CheckType::Crc32);
    let mut w = lzma_rust2::XzWriter::new(Vec::new(), o).unwrap();
    w.write_all(data).unwrap();
    w.finish().unwrap()
}

fn gz(data: &[u8]) -> Vec<u8> {
    let mut w = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    w.write_all(data).unwrap();
    w.finish().unwrap()
}

/// A bzImage header naming `release` as the kernel's version string.
fn bzimage(release: &str) -> Vec<u8> {
    let mut v = vec![0u8; 0x400];
    v[0x202..0x206].copy_from_slice(b"HdrS");
    v[0x20e..0x210].copy_from_slice(&0x100u16.to_le_bytes());
    let s = format!("{release} (debian-kernel@lists.debian.org) #1 SMP\0");
    v[0x300..0x300 + s.len()].copy_from_slice(s.as_bytes());
    v
}

#[test]
fn the_release_is_read_from_the_setup_header() {
    assert_eq!(
        kernel_release(&bzimage("6.12.48+deb13-amd64")).as_deref(),
        Some("6.12.48+deb13-amd64")
    );
    assert_eq!(kernel_release(b"not a kernel"), None);
}

#[test]
fn modules_dep_gives_dependencies_first_each_once() {
    let dep = parse_modules_dep(DEP);
    assert_eq!(
        dep["nvme_core"].0,
        "kernel/drivers/nvme/host/nvme-core.ko.xz"
    );
    let order = load_order(&dep, &["virtio_iommu", "nvme"]).unwrap();
    assert_eq!(
        order,
        [
            "kernel/drivers/virtio/virtio.ko",
            "kernel/drivers/iommu/virtio-iommu.ko.zst",
            "kernel/drivers/nvme/common/nvme-auth.ko.xz",
            "kernel/drivers/nvme/host/nvme-core.ko.xz",
            "kernel/drivers/nvme/host/nvme.ko.xz",
        ]
    );
    assert_eq!(load_order(&dep, &["virtio_pci"]), Err("virtio_pci".into()));
    assert_eq!(module_name("a/b/virtio-iommu.ko.zst"), "virtio_iommu");
}

#[test]
fn compressed_modules_are_decompressed_by_their_suffix() {
    let elf = b"\x7fELF module".repeat(100);
    assert_eq!(decompress("m.ko.xz", &xz(&elf)).unwrap(), elf);
    let zst =
        ruzstd::encoding::compress_to_vec(&elf[..], ruzstd::encoding::CompressionLevel::Fastest);
    assert_eq!(decompress("m.ko.zst", &zst).unwrap(), elf);
    assert_eq!(decompress("m.ko.gz", &gz(&elf)).unwrap(), elf);
    assert_eq!(decompress("m.ko", &elf).unwrap(), elf);
    let e = decompress("/x/m.ko.xz", b"garbage")
        .unwrap_err()
        .to_string();
    assert!(e.contains("/x/m.ko.xz") && e.contains("xz"), "{e}");
}

/// A kernel package unpacked: boot/vmlinuz-REL, boot/config-REL,
/// usr/lib/modules/REL with modules.dep and the modules.
fn fake_package(dir: &Path, release: &str, config: &str) -> PathBuf {
    let boot = dir.join("boot");
    let mods = dir.join("usr/lib/modules").join(release);
    std::fs::create_dir_all(&boot).unwrap();
    std::fs::write(boot.join(format!("config-{release}")), config).unwrap();
    for line in DEP.lines() {
        let path = line.split(':').next().unwrap();
        let file = mods.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        let body = format!("module {}", module_name(path)).into_bytes();
        let data = if path.ends_with(".xz") {
            xz(&body)
        } else if path.ends_with(".zst") {
            ruzstd::encoding::compress_to_vec(
                &body[..],
                ruzstd::encoding::CompressionLevel::Fastest,
            )
        } else if path.ends_with(".gz") {
            gz(&body)
        } else {
            body
        };
        std::fs::write(file, data).unwrap();
    }
    std::fs::write(mods.join("modules.dep"), DEP).unwrap();
    let k = boot.join(format!("vmlinuz-{release}"));
    std::fs::write(&k, bzimage(release)).unwrap();
    k
}

#[test]
fn a_package_kernels_modules_go_into_a_layer_in_order() {
    let t = tempfile::tempdir().unwrap();
    let rel = "6.12.48+deb13-amd64";
    let config =
        "CONFIG_VIRTIO=m\nCONFIG_VIRTIO_PCI=y\nCONFIG_VIRTIO_IOMMU=m\nCONFIG_BLK_DEV_NVME=m\n";
    let k = fake_package(t.path(), rel, config);
    let dir = modules_dir(&k, rel, None).unwrap();
    assert_eq!(dir, t.path().join("usr/lib/modules").join(rel));
    // --modules: the directory or its parent.
    assert_eq!(modules_dir(&k, rel, Some(&dir)), Some(dir.clone()));
    assert_eq!(modules_dir(&k, rel, dir.parent()), Some(dir.clone()));
    assert_eq!(
        modules_dir(&k, "6.1.0-9-amd64", Some(&dir)),
        Some(dir.clone())
    );
    assert_eq!(modules_dir(&k, rel, Some(t.path())), None);

    let paths = modules_for(&dir, config).unwrap();
    let names: Vec<String> = paths.iter().map(|p| module_name(p)).collect();
    assert_eq!(
        names,
        ["virtio", "virtio_iommu", "nvme_auth", "nvme_core", "nvme"]
    );
    let layer = String::from_utf8_lossy(&modules_layer(&dir, &paths).unwrap()).into_owned();
    assert!(layer.contains("virtio.ko\nvirtio_iommu.ko\nnvme_auth.ko\nnvme_core.ko\nnvme.ko\n"));
    assert!(layer.contains("module nvme_core") && layer.ends_with("TRAILER!!!\0\0\0\0"));

    // Appended to the image, cached by both.
    let base = t.path().join("base.cpio");
    std::fs::write(&base, b"070701base").unwrap();
    let cache = t.path().join("cache");
    let img = image_with_layer(&base, b"LAYER", &cache, false).unwrap();
    assert_eq!(std::fs::read(&img).unwrap(), b"070701baseLAYER");
    assert_eq!(
        image_with_layer(&base, b"LAYER", &cache, true).unwrap(),
        img
    );

    // A module modules.dep does not have is named with its option.
    let e = modules_for(&dir, "CONFIG_VIRTIO_PCI=m\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("virtio_pci") && e.contains("CONFIG_VIRTIO_PCI=m") && e.contains("--modules"),
        "{e}"
    );
}

#[test]
fn a_kernel_without_a_columns_iommu_driver_is_refused_by_column() {
    let all = config_with_guest_options();
    let modular = all
        .replace("CONFIG_BLK_DEV_NVME=y", "CONFIG_BLK_DEV_NVME=m")
        .replace("CONFIG_VIRTIO_IOMMU=y", "CONFIG_VIRTIO_IOMMU=m");
    let cols = |i: Iommu| vec![("col".to_string(), i)];
    // Modules allowed where the modules directory was found.
    assert_eq!(
        kernel_gaps(&modular, &cols(Iommu::Viommu), true),
        (vec![], vec![])
    );
    let (d, o) = kernel_gaps(&modular, &cols(Iommu::Viommu), false);
    assert!(d.is_empty());
    assert_eq!(o, ["CONFIG_VIRTIO_IOMMU (=m)", "CONFIG_BLK_DEV_NVME (=m)"]);
    // VT-d needs INTEL_IOMMU, not virtio-iommu.
    let no_viommu = all
        .replace("CONFIG_VIRTIO_IOMMU=y\n", "")
        .replace("CONFIG_ACPI_VIOT=y\n", "");
    let (d, o) = kernel_gaps(&no_viommu, &cols(Iommu::Vtd), true);
    assert_eq!(d, [("CONFIG_INTEL_IOMMU".to_string(), "col".to_string())]);
    assert!(o.is_empty(), "{o:?}");
    let with_vtd = format!("{no_viommu}CONFIG_INTEL_IOMMU=y\n");
    assert_eq!(
        kernel_gaps(&with_vtd, &cols(Iommu::Vtd), true),
        (vec![], vec![])
    );
    // Behind virtio-iommu the same kernel lacks its driver.
    let (d, _) = kernel_gaps(&with_vtd, &cols(Iommu::Viommu), true);
    assert_eq!(d, [("CONFIG_VIRTIO_IOMMU".to_string(), "col".to_string())]);
    let (d, _) = kernel_gaps(&with_vtd, &cols(Iommu::Amd), true);
    assert_eq!(d, [("CONFIG_AMD_IOMMU".to_string(), "col".to_string())]);
    assert_eq!(
        kernel_gaps(&no_viommu, &cols(Iommu::None), true),
        (vec![], vec![])
    );
}

#[test]
fn a_package_without_modules_dep_is_read_from_the_modules_own_depends() {
    let t = tempfile::tempdir().unwrap();
    let rel = "6.12.117+deb13-amd64";
    let mods = t.path().join("usr/lib/modules").join(rel);
    let put = |path: &str, depends: &str| {
        let f = mods.join(path);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        let body = format!("\x7fELF\0license=GPL\0depends={depends}\0vermagic={rel}\0");
        std::fs::write(f, xz(body.as_bytes())).unwrap();
    };
    put("kernel/drivers/nvme/host/nvme.ko.xz", "nvme-core");
    put("kernel/drivers/nvme/host/nvme-core.ko.xz", "nvme-auth");
    put("kernel/drivers/nvme/common/nvme-auth.ko.xz", "");
    put("kernel/drivers/iommu/virtio-iommu.ko.xz", "");
    std::fs::create_dir_all(t.path().join("boot")).unwrap();
    let k = t.path().join(format!("boot/vmlinuz-{rel}"));
    std::fs::write(&k, bzimage(rel)).unwrap();
    let dir = modules_dir(&k, rel, None).unwrap();
    let paths = modules_for(&dir, "CONFIG_VIRTIO_IOMMU=m\nCONFIG_BLK_DEV_NVME=m\n").unwrap();
    let names: Vec<String> = paths.iter().map(|p| module_name(p)).collect();
    assert_eq!(names, ["virtio_iommu", "nvme_auth", "nvme_core", "nvme"]);
    assert_eq!(modinfo_depends(b"x\0depends=a-b,c\0"), ["a_b", "c"]);
}
