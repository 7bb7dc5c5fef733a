//! What is done before any VM runs: the host's checks and the user's
//! consent ([`preflight`], reading [`host`] and [`sysfs`], running tools
//! through [`exec`], a kernel's embedded config through [`ikconfig`]),
//! the guest initramfs ([`image`]) and the drive's binding to vfio-pci
//! ([`bind`], restored on exit).

pub mod bind;
pub mod blockdev;
pub mod exec;
pub mod host;
pub mod ikconfig;
pub mod image;
pub mod modules;
pub mod preflight;
pub mod procfs;
pub mod provenance;
pub mod sysfs;
