//! The checks of [`Args::validate`], one step per flag or group of
//! flags, in the order their errors are reported.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::{
    bad, normalize_bdf, Args, BlockSize, CliError, Config, GUEST_MAX_CPUS, HUGE_PAGE_BYTES,
};
use crate::columns::{self, Column, Kernel};
use crate::units::{parse_size, size_label};

impl Args {
    /// Check every flag; the first bad one is the error.
    pub fn validate(self) -> Result<Config, CliError> {
        let bdf =
            normalize_bdf(&self.device).ok_or_else(|| CliError::BadBdf(self.device.clone()))?;
        if self.destroy_data.is_none() && !self.dry_run && self.report_from.is_empty() {
            return Err(CliError::NoConsent(bdf));
        }
        let columns = columns::parse_columns(&self.columns)?;
        let baseline = self.baseline_column(&columns)?;
        self.check_lead(&columns)?;
        let bs = self.block_sizes()?;
        let numjobs = self.distinct_numjobs()?;
        if self.breakdown && self.count_runtime < 2 {
            return Err(bad(
                "--count-runtime",
                self.count_runtime,
                "--breakdown runs each fio job again for --count-runtime seconds and records the middle half: give at least 2 (e.g. --count-runtime 4), or drop --breakdown",
            ));
        }
        if numjobs.is_empty() {
            return Err(bad(
                "--numjobs",
                "",
                "give at least one value, e.g. --numjobs 1",
            ));
        }
        self.check_guest_shape()?;
        let mem = self.guest_memory()?;
        self.check_durations()?;
        let (verify_bytes, span_bytes) = self.verify_and_span()?;
        let kernels_named = self.named_kernels()?;
        if self.first_round == 0 {
            return Err(bad("--first-round", 0, "rounds are numbered from 1"));
        }
        self.check_kernels_given(&columns, &kernels_named)?;
        let cfg = Config {
            bdf,
            kernels_named,
            columns,
            baseline,
            bs,
            numjobs,
            memory_mib: mem >> 20,
            verify_bytes,
            span_bytes,
            drive_bytes: None,
            qemu_no_trace: None,
            args: self,
        };
        check_guest_huge_buffers(&cfg)?;
        Ok(cfg)
    }

    /// `--baseline`: the index of its column (the first when not given).
    fn baseline_column(&self, columns: &[Column]) -> Result<usize, CliError> {
        let baseline = match &self.baseline {
            None => 0,
            Some(b) => columns.iter().position(|c| &c.tag == b).ok_or_else(|| {
                CliError::BadBaseline(
                    b.clone(),
                    columns
                        .iter()
                        .map(|c| c.tag.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                )
            })?,
        };
        Ok(baseline)
    }

    /// `--lead` names one of the columns.
    fn check_lead(&self, columns: &[Column]) -> Result<(), CliError> {
        if let Some(l) = &self.lead {
            if !columns.iter().any(|c| &c.tag == l) {
                let tags: Vec<&str> = columns.iter().map(|c| c.tag.as_str()).collect();
                return Err(CliError::BadLead(l.clone(), tags.join(", ")));
            }
        }
        Ok(())
    }

    /// `--bs`: the block sizes, each once.
    fn block_sizes(&self) -> Result<Vec<BlockSize>, CliError> {
        let mut bs = Vec::new();
        for s in self.bs.iter().filter(|s| !s.trim().is_empty()) {
            let bytes = parse_size(s)
                .ok_or_else(|| bad("--bs", s, "not a size; use NUMBER[k|m], e.g. 4k"))?;
            if bytes < 512 || bytes % 512 != 0 || bytes > 16 << 20 {
                return Err(bad(
                    "--bs",
                    s,
                    "block sizes are multiples of 512 bytes, at most 16m",
                ));
            }
            let label = size_label(bytes);
            if !bs.iter().any(|b: &BlockSize| b.label == label) {
                bs.push(BlockSize { label, bytes });
            }
        }
        if bs.is_empty() {
            return Err(bad(
                "--bs",
                "",
                "name at least one block size, e.g. --bs 4k,128k",
            ));
        }
        Ok(bs)
    }

    /// `--numjobs`: each in range, each once.
    fn distinct_numjobs(&self) -> Result<Vec<u32>, CliError> {
        let mut numjobs = Vec::new();
        for &n in &self.numjobs {
            if !(1..=64).contains(&n) {
                return Err(bad("--numjobs", n, "between 1 and 64"));
            }
            if !numjobs.contains(&n) {
                numjobs.push(n);
            }
        }
        Ok(numjobs)
    }

    /// `--iodepth` and `--guest-cpus` in range.
    fn check_guest_shape(&self) -> Result<(), CliError> {
        if !(1..=4096).contains(&self.iodepth) {
            return Err(bad("--iodepth", self.iodepth, "between 1 and 4096"));
        }
        if !(1..=GUEST_MAX_CPUS).contains(&self.guest_cpus) {
            return Err(bad(
                "--guest-cpus",
                self.guest_cpus,
                format!("between 1 and {GUEST_MAX_CPUS}: the guest kernels are built with CONFIG_NR_CPUS={GUEST_MAX_CPUS} (guest-patches/config-fragment) and would use no more; for larger guests raise both and rebuild the kernels"),
            ));
        }
        Ok(())
    }

    /// `--guest-memory` in bytes: whole MiB, at least 256M; whole huge
    /// pages with `--hugepages`.
    fn guest_memory(&self) -> Result<u64, CliError> {
        let mem = parse_size(&self.guest_memory).ok_or_else(|| {
            bad(
                "--guest-memory",
                &self.guest_memory,
                "not a size; e.g. 1G or 2048M",
            )
        })?;
        if mem < 256 << 20 || mem % (1 << 20) != 0 {
            return Err(bad(
                "--guest-memory",
                &self.guest_memory,
                "a whole number of MiB, at least 256M",
            ));
        }
        if self.hugepages && mem % HUGE_PAGE_BYTES != 0 {
            return Err(bad(
                "--guest-memory",
                &self.guest_memory,
                "with --hugepages a whole number of 2 MiB huge pages, e.g. 1G or 2048M",
            ));
        }
        Ok(mem)
    }

    /// `--runtime`, `--ramp`, `--count-runtime`, `--rounds` and `--stall-seconds` in range.
    fn check_durations(&self) -> Result<(), CliError> {
        if !(1..=3600).contains(&self.runtime) {
            return Err(bad("--runtime", self.runtime, "seconds between 1 and 3600"));
        }
        if self.ramp > 600 {
            return Err(bad("--ramp", self.ramp, "seconds between 0 and 600"));
        }
        if self.count_runtime > 600 {
            return Err(bad(
                "--count-runtime",
                self.count_runtime,
                "seconds between 0 (no counting runs) and 600",
            ));
        }
        if !(1..=100).contains(&self.rounds) {
            return Err(bad(
                "--rounds",
                self.rounds,
                "between 1 and 100 (3 or more to judge noise)",
            ));
        }
        if self.stall_seconds < 15 {
            return Err(bad(
                "--stall-seconds",
                self.stall_seconds,
                "at least 15 (the guest reports progress every 5 s)",
            ));
        }
        Ok(())
    }

    /// `--verify-size` and `--span` in bytes.
    fn verify_and_span(&self) -> Result<(u64, u64), CliError> {
        let verify_bytes = parse_size(&self.verify_size)
            .filter(|v| *v >= 1 << 20 && v % 4096 == 0)
            .ok_or_else(|| {
                bad(
                    "--verify-size",
                    &self.verify_size,
                    "a size of at least 1M, e.g. 8M",
                )
            })?;
        let span_bytes = parse_size(&self.span)
            .filter(|v| *v >= 64 << 20 && v % (1 << 20) == 0)
            .ok_or_else(|| {
                bad(
                    "--span",
                    &self.span,
                    "a whole number of MiB, at least 64M, e.g. 4G",
                )
            })?;
        Ok((verify_bytes, span_bytes))
    }

    /// `--kernel NAME=PATH`s, by name.
    fn named_kernels(&self) -> Result<BTreeMap<String, PathBuf>, CliError> {
        let mut kernels_named = BTreeMap::new();
        for k in &self.kernels {
            let Some((name, path)) = k
                .split_once('=')
                .filter(|(n, p)| columns::valid_kernel_name(n) && !p.is_empty())
            else {
                return Err(bad(
                    "--kernel",
                    k,
                    "NAME=PATH with NAME of letters, digits, '.', '_', '-' (not stock or patched), e.g. stock-7.3=/boot/vmlinuz-7.3",
                ));
            };
            if kernels_named
                .insert(name.to_string(), PathBuf::from(path))
                .is_some()
            {
                return Err(bad("--kernel", k, "each NAME once"));
            }
        }
        Ok(kernels_named)
    }

    /// Every column's kernel is given (not needed for `--dry-run` or `--report-from`).
    fn check_kernels_given(
        &self,
        columns: &[Column],
        kernels_named: &BTreeMap<String, PathBuf>,
    ) -> Result<(), CliError> {
        if !self.dry_run && self.report_from.is_empty() {
            for c in columns {
                let (given, kernel, flag, variant) = match &c.kernel {
                    Kernel::Stock => (&self.kernel_stock, "stock", "--kernel-stock", "baseline"),
                    Kernel::Patched => (
                        &self.kernel_patched,
                        "patched",
                        "--kernel-patched",
                        "patched",
                    ),
                    Kernel::Named(n) if kernels_named.contains_key(n) => continue,
                    Kernel::Named(n) => {
                        return Err(CliError::MissingNamedKernel {
                            column: c.tag.clone(),
                            name: n.clone(),
                        })
                    }
                };
                if given.is_none() {
                    return Err(CliError::MissingKernel {
                        column: c.tag.clone(),
                        kernel,
                        flag,
                        variant,
                    });
                }
            }
        }
        Ok(())
    }
}

/// `--guest-hugepages`: fio's buffers take at most half the guest's RAM.
fn check_guest_huge_buffers(cfg: &Config) -> Result<(), CliError> {
    let Some(pages) = cfg.guest_huge_buffers() else {
        return Ok(());
    };
    let mib = pages * (HUGE_PAGE_BYTES >> 20);
    if mib > cfg.memory_mib / 2 {
        return Err(bad(
            "--guest-memory",
            &cfg.args.guest_memory,
            format!(
                "--guest-hugepages reserves {pages} 2 MiB pages ({mib} MiB) in each guest for fio's buffers \
                 (--iodepth {} times the largest --bs, per job of the largest --numjobs), more than half its RAM: \
                 raise --guest-memory, lower --iodepth or --numjobs, or drop --guest-hugepages",
                cfg.args.iodepth
            ),
        ));
    }
    Ok(())
}
