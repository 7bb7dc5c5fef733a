//! The guest kernels: the options they must build in, read from their
//! embedded config or a config file that goes with them.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{problem, Checks, Problem};
use crate::columns::Iommu;

/// What a guest kernel must have built in (`=y`): the guest image loads
/// no modules, so a distribution kernel with these as modules boots and
/// never sees the NVMe. Each is there for something the image does:
/// the uncompressed cpio initramfs (BLK_DEV_INITRD), its `/init` shell
/// script and the busybox and fio ELF binaries (BINFMT_SCRIPT, BINFMT_ELF),
/// the mounts of /proc, /sys and /dev (PROC_FS, SYSFS, DEVTMPFS), the
/// console=ttyS0 the host reads the results from (SERIAL_8250,
/// SERIAL_8250_CONSOLE), the virtio-iommu found through ACPI's VIOT table
/// on virtio-pci (PCI, PCI_MSI, VIRTIO, VIRTIO_PCI, VIRTIO_IOMMU,
/// ACPI_VIOT, which needs ACPI, also the power-off path), the drive
/// (BLK_DEV_NVME), and fio: its libaio engine (AIO), its SysV shared
/// memory between job processes (SYSVIPC) and its threads (FUTEX).
pub const GUEST_KERNEL_OPTIONS: &[&str] = &[
    "CONFIG_BLK_DEV_INITRD",
    "CONFIG_BINFMT_ELF",
    "CONFIG_BINFMT_SCRIPT",
    "CONFIG_PROC_FS",
    "CONFIG_SYSFS",
    "CONFIG_DEVTMPFS",
    "CONFIG_SERIAL_8250",
    "CONFIG_SERIAL_8250_CONSOLE",
    "CONFIG_PCI",
    "CONFIG_PCI_MSI",
    "CONFIG_VIRTIO",
    "CONFIG_VIRTIO_PCI",
    "CONFIG_VIRTIO_IOMMU",
    "CONFIG_ACPI_VIOT",
    "CONFIG_BLK_DEV_NVME",
    "CONFIG_AIO",
    "CONFIG_SYSVIPC",
    "CONFIG_FUTEX",
];

/// What the guest kernels are booted for: by kernel path, its columns'
/// tags and vIOMMUs; and `--modules DIR`.
#[derive(Debug, Clone, Default)]
pub struct GuestUse {
    /// Each kernel's columns (tag, IOMMU).
    pub columns: BTreeMap<PathBuf, Vec<(String, Iommu)>>,
    /// `--modules DIR`: where modular kernels' modules are.
    pub modules: Option<PathBuf>,
    /// `--guest-hugepages`: every guest reserves huge pages for fio's
    /// buffers, which needs [`HUGE_BUFFER_OPTION`].
    pub huge_buffers: bool,
}

/// What `--guest-hugepages` needs of every guest kernel: hugetlbfs (and
/// with it the huge page pool fio's SHM_HUGETLB segments come from).
pub const HUGE_BUFFER_OPTION: &str = "CONFIG_HUGETLBFS";

/// The kernel config that goes with the bzImage `kernel`, if one is found:
/// `.config` beside it (guest-patches' cache), `config-VER` beside a
/// `vmlinuz-VER` (a distribution's /boot), or the tree's `.config` for
/// `arch/x86/boot/bzImage`.
pub fn kernel_config(kernel: &Path) -> Option<PathBuf> {
    let dir = kernel.parent()?;
    let name = kernel.file_name()?.to_string_lossy();
    let mut c = vec![dir.join(".config")];
    if let Some(ver) = name.strip_prefix("vmlinuz-") {
        c.push(dir.join(format!("config-{ver}")));
    }
    if kernel.ends_with("arch/x86/boot/bzImage") {
        c.push(dir.parent()?.parent()?.parent()?.join(".config"));
    }
    c.into_iter().find(|p| p.is_file())
}

/// A kernel config that builds in every option of [`GUEST_KERNEL_OPTIONS`]
/// and nothing else (the tests' good kernel).
#[cfg(test)]
pub(crate) fn config_with_guest_options() -> String {
    GUEST_KERNEL_OPTIONS
        .iter()
        .map(|o| format!("{o}=y\n"))
        .collect()
}

/// The options of [`GUEST_KERNEL_OPTIONS`] a kernel config does not build in.
pub fn missing_guest_options(config: &str) -> Vec<String> {
    GUEST_KERNEL_OPTIONS
        .iter()
        .filter(|o| !config.lines().any(|l| l.trim() == format!("{o}=y")))
        .map(|o| {
            let module = config.lines().any(|l| l.trim() == format!("{o}=m"));
            format!("{o}{}", if module { " (=m)" } else { "" })
        })
        .collect()
}

/// A guest kernel's config and where it came from: its embedded config
/// (it cannot be stale), else a config file that goes with it; `Err`
/// says why neither was read.
pub fn read_kernel_config(k: &Path) -> Result<(String, String), String> {
    let found = match crate::setup::ikconfig::read_embedded_config(k) {
        Ok(Some(text)) => return Ok((text, "its embedded config (CONFIG_IKCONFIG)".into())),
        found => found,
    };
    let cfg = kernel_config(k);
    if let Some((cfg, text)) = cfg.and_then(|c| std::fs::read_to_string(&c).ok().map(|t| (c, t))) {
        return Ok((text, format!("its config {}", cfg.display())));
    }
    Err(match found {
        Err(e) => format!("its embedded config cannot be read ({e})"),
        _ => "it has no embedded config (CONFIG_IKCONFIG)".into(),
    })
}

/// Whether `config` has `option` as `value` (`y`, `m`).
fn has(config: &str, option: &str, value: &str) -> bool {
    let want = format!("{option}={value}");
    config.lines().any(|l| l.trim() == want)
}

/// What a kernel with `config`, booted by `columns` (tag, IOMMU), lacks:
/// one line per column whose vIOMMU driver it has neither `y` nor `m`
/// (`(option, column)`), and the other options it does not build in
/// (`=m` allowed for [`crate::setup::modules::MODULE_OPTIONS`] when
/// `modules` says its modules directory was found). With no columns
/// known, every option is needed (as behind a virtio-iommu).
pub fn kernel_gaps(
    config: &str,
    columns: &[(String, Iommu)],
    modules: bool,
) -> (Vec<(String, String)>, Vec<String>) {
    let viommu = columns.is_empty() || columns.iter().any(|(_, i)| *i == Iommu::Viommu);
    let mut drivers = Vec::new();
    for (tag, iommu) in columns {
        if let Some(o) = iommu.driver_option() {
            if !has(config, o, "y") && !has(config, o, "m") {
                drivers.push((o.to_string(), tag.clone()));
            }
        }
    }
    let may_be_module = |o: &str| {
        modules
            && crate::setup::modules::MODULE_OPTIONS
                .iter()
                .any(|(m, _)| *m == o)
    };
    let others = GUEST_KERNEL_OPTIONS
        .iter()
        .filter(|o| viommu || !matches!(**o, "CONFIG_VIRTIO_IOMMU" | "CONFIG_ACPI_VIOT"))
        .filter(|o| !drivers.iter().any(|(d, _)| d == *o))
        .filter(|o| !(has(config, o, "y") || (may_be_module(o) && has(config, o, "m"))))
        .map(|o| format!("{o}{}", if has(config, o, "m") { " (=m)" } else { "" }))
        .collect();
    (drivers, others)
}

impl Checks {
    /// Every `--kernel*` file is there and builds in what the guest needs:
    /// the vIOMMU driver of each column that boots it (`y` or `m`), and
    /// the rest built in, or as modules its modules directory holds.
    pub(super) fn check_kernels(&self, p: &mut Vec<Problem>) {
        for (flag, k) in &self.kernels {
            if !k.is_file() {
                p.push(problem(
                    format!("{flag} {}: no such file", k.display()),
                    "build it with guest-patches/linux-6.12/build.sh baseline|patched, or fix the path",
                ));
                continue;
            }
            if *flag == "--initramfs" {
                continue;
            }
            let (text, source) = match read_kernel_config(k) {
                Ok(found) => found,
                Err(why) => {
                    tracing::warn!(
                        "{flag} {}: {why} and no config file goes with it (.config beside it, config-VER beside vmlinuz-VER, a tree's .config): its built-in options ({}) are checked only when the first guest boots",
                        k.display(),
                        GUEST_KERNEL_OPTIONS.join(", ")
                    );
                    continue;
                }
            };
            let release = std::fs::read(k)
                .ok()
                .and_then(|b| crate::setup::modules::kernel_release(&b));
            let mods = release.as_deref().and_then(|r| {
                crate::setup::modules::modules_dir(k, r, self.guest.modules.as_deref())
            });
            if self.guest.huge_buffers && !has(&text, HUGE_BUFFER_OPTION, "y") {
                p.push(problem(
                    format!(
                        "{flag} {}: {source} has no {HUGE_BUFFER_OPTION}=y, which --guest-hugepages needs (the guest reserves huge pages for fio's buffers)",
                        k.display()
                    ),
                    format!("use a kernel with {HUGE_BUFFER_OPTION}=y (guest-patches/config-fragment has it), or drop --guest-hugepages"),
                ));
            }
            let columns = self.guest.columns.get(k).cloned().unwrap_or_default();
            let (drivers, missing) = kernel_gaps(&text, &columns, mods.is_some());
            for (option, tag) in drivers {
                p.push(problem(
                    format!(
                        "{flag} {}: {source} has no {option} (neither y nor m), the vIOMMU driver column {tag} needs",
                        k.display()
                    ),
                    format!("use a kernel with {option}=y or =m for column {tag}, or drop that column"),
                ));
            }
            if missing.is_empty() {
                tracing::info!(
                    "{flag} {}: {source} has every option the guest needs{}",
                    k.display(),
                    mods.map(|d| format!(" (modules from {})", d.display()))
                        .unwrap_or_default()
                );
            } else {
                let modular = missing.iter().any(|m| m.ends_with("(=m)"));
                p.push(problem(
                    format!(
                        "{flag} {}: {source} does not build in {}{}",
                        k.display(),
                        missing.join(", "),
                        if modular {
                            format!("; no modules directory for its release {} was found to load them from (lib/modules/RELEASE beside its boot/, /lib/modules/RELEASE)", release.as_deref().unwrap_or("(unknown)"))
                        } else {
                            "; the guest would never see the NVMe".into()
                        }
                    ),
                    if modular {
                        "pass its modules directory with --modules DIR, or use a kernel with them =y (guest-patches/linux-6.12/build.sh baseline|patched builds one)"
                    } else {
                        "use a kernel with them =y: guest-patches/linux-6.12/build.sh baseline|patched builds one (guest-patches/config-fragment lists what it needs)"
                    },
                ));
            }
        }
    }
}
