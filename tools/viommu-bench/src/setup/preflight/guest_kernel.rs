//! The guest kernels: the options they must build in, read from their
//! embedded config or a config file that goes with them.
use std::path::{Path, PathBuf};

use super::{problem, Checks, Problem};

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

impl Checks {
    /// Every `--kernel*` file is there and builds in what the guest needs.
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
            // The kernel's own embedded config first (it cannot be stale),
            // then a config file that goes with it.
            let (text, source) = match crate::setup::ikconfig::read_embedded_config(k) {
                Ok(Some(text)) => (text, "its embedded config (CONFIG_IKCONFIG)".to_string()),
                found => {
                    let cfg = kernel_config(k);
                    let text = cfg.as_ref().and_then(|c| std::fs::read_to_string(c).ok());
                    match (found, cfg, text) {
                        (_, Some(cfg), Some(text)) => {
                            (text, format!("its config {}", cfg.display()))
                        }
                        (found, _, _) => {
                            let why = match found {
                                Err(e) => format!("its embedded config cannot be read ({e})"),
                                _ => "it has no embedded config (CONFIG_IKCONFIG)".into(),
                            };
                            tracing::warn!(
                                "{flag} {}: {why} and no config file goes with it (.config beside it, config-VER beside vmlinuz-VER, a tree's .config): its built-in options ({}) are checked only when the first guest boots",
                                k.display(),
                                GUEST_KERNEL_OPTIONS.join(", ")
                            );
                            continue;
                        }
                    }
                }
            };
            let missing = missing_guest_options(&text);
            if missing.is_empty() {
                tracing::info!(
                    "{flag} {}: {source} builds in every option the guest needs",
                    k.display()
                );
            } else {
                p.push(problem(
                    format!(
                        "{flag} {}: {source} does not build in {}; the guest image loads no modules, so the guest would never see the NVMe",
                        k.display(),
                        missing.join(", ")
                    ),
                    "use a kernel with them =y: guest-patches/linux-6.12/build.sh baseline|patched builds one (guest-patches/config-fragment lists what it needs)",
                ));
            }
        }
    }
}
