//! `--restore BDF`: give back a drive a killed run left on vfio-pci.

use std::time::Duration;

use crate::cli::{normalize_bdf, Args};
use crate::setup::bind;
use crate::setup::sysfs::Root;

/// Gives `bdf` back, printing each step; the exit status (0 done or
/// nothing to do, 1 failed, 2 a bad BDF).
pub fn main(args: &Args, bdf: &str) -> u8 {
    let Some(bdf) = normalize_bdf(bdf) else {
        eprintln!("viommu-bench: --restore {bdf:?}: not a PCI address; give DDDD:BB:DD.F, e.g. 0000:01:00.0 (lspci -D -d ::0108)");
        return 2;
    };
    match bind::restore_left(
        &Root::new(&args.root),
        &bdf,
        Duration::from_secs(args.restore_timeout),
    ) {
        Ok(lines) => {
            for l in lines {
                println!("viommu-bench --restore: {l}");
            }
            0
        }
        Err(e) => {
            eprintln!("viommu-bench --restore {bdf}: {e}");
            1
        }
    }
}
