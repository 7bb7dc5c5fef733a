//! What the run will do, said before it does it: the line printed on
//! stderr before the first change, and the whole plan of `--dry-run`.

use crate::cli::Config;
use crate::columns::launch;
use crate::plan;
use crate::units::human_duration;

use super::prepare::Prepared;

/// One paragraph: the binding, the drive whose data goes, the VMs, the
/// time, where the results go and the pinning.
pub fn what_will_happen(cfg: &Config, p: &Prepared) -> String {
    let a = &cfg.args;
    let what = format!(
        "viommu-bench will: {}; DESTROY the data on {} with fio writes; boot {} VMs ({} columns x {} rounds; {} per VM: write+verify, then {} {} run(s) of {} s{}){}; about {} in all; results in {}{}",
        binding(cfg, p),
        drive(cfg, p),
        p.cells.len(),
        cfg.columns.len(),
        a.rounds,
        human_duration(p.estimate),
        p.phases.len(),
        a.rw.as_str(),
        a.runtime,
        count_note(cfg, p),
        hugepages(cfg),
        human_duration(p.total),
        p.out.display(),
        pinning(p),
    );
    format!("{what}; {}", plan::precondition_note(cfg))
}

/// The drive: its address, model and serial, what is on it and the
/// namespace the guests measure.
fn drive(cfg: &Config, p: &Prepared) -> String {
    let facts = &p.pre.facts;
    format!(
        "{}{}{} ({})",
        cfg.bdf,
        facts
            .model
            .as_deref()
            .map(|m| format!(" ({m})"))
            .unwrap_or_default(),
        facts
            .serial
            .as_deref()
            .map(|s| format!(" serial {s}"))
            .unwrap_or_default(),
        facts.contents_note()
    )
}

/// What happens to the drive's driver.
fn binding(cfg: &Config, p: &Prepared) -> String {
    let now_on = p.pre.facts.driver.as_deref().unwrap_or("no driver");
    if cfg.args.no_bind {
        "use it as bound (--no-bind)".to_string()
    } else if now_on == "vfio-pci" {
        "use it on vfio-pci, where it already is".to_string()
    } else {
        format!(
            "bind it to vfio-pci (from {now_on}; given back at the end, also on failure or Ctrl-C)"
        )
    }
}

/// `--hugepages`' pages and `--guest-hugepages`' buffers, or nothing.
fn hugepages(cfg: &Config) -> String {
    let guest = cfg.guest_huge_buffers().map_or(String::new(), |n| {
        format!(", fio's buffers in {n} 2 MiB huge pages each guest reserves (--guest-hugepages)")
    });
    if !cfg.args.hugepages {
        return guest;
    }
    format!(
        ", one at a time, each with its {} MiB of RAM in {} reserved 2 MiB huge pages (--hugepages){guest}",
        cfg.memory_mib,
        (cfg.memory_mib << 20).div_ceil(crate::cli::HUGE_PAGE_BYTES)
    )
}

/// `--pin`'s CPUs and `--pin-vcpus`' layout, or nothing.
fn pinning(p: &Prepared) -> String {
    let pin = match &p.host.pinned_cpus {
        Some(list) => match p.host.numa_node.filter(|n| *n >= 0) {
            Some(n) => format!("; every VMM pinned to CPUs {list} (NUMA node {n} of the drive)"),
            None => format!(
                "; every VMM pinned to CPUs {list} (the drive reports no NUMA node: the P cores of a hybrid CPU, else every online CPU)"
            ),
        },
        None => String::new(),
    };
    match &p.provenance.vcpu_pinning {
        Some(l) => format!("{pin}; threads placed (--pin-vcpus): {l}"),
        None => pin,
    }
}

/// The untimed counting and breakdown runs, or nothing.
fn count_note(cfg: &Config, p: &Prepared) -> String {
    let a = &cfg.args;
    let count_note = if p.counting {
        format!(
            "; stock QEMU's vIOMMU VMs then run each again for {} s, untimed, with its trace on ({} more each; its counts come from these)",
            a.count_runtime,
            human_duration(plan::count_pass(cfg))
        )
    } else {
        String::new()
    };
    if a.breakdown {
        format!(
            "{count_note}; with --breakdown every vIOMMU VM then runs each again for {} s, untimed, while the host's tracefs records its VMM's threads ({} more each)",
            a.count_runtime,
            human_duration(plan::breakdown_pass(cfg))
        )
    } else {
        count_note
    }
}

/// `--dry-run`: `what`, the command lines, the order and the phases;
/// the exit status (2 when a prerequisite is missing).
pub fn dry_run(cfg: &Config, p: &Prepared, what: &str) -> u8 {
    let a = &cfg.args;
    println!("DRY RUN: nothing is bound, built or started.\n{what}\n");
    println!("guest kernel command line: {}", p.cmdline);
    println!("guest image: {}", p.inputs.initramfs.display());
    println!("\ncolumns:");
    for c in &cfg.columns {
        let l = launch(
            c,
            &p.inputs,
            &p.cmdline,
            &p.run_dir,
            &format!("{}-r1", c.tag),
        );
        println!("  {}:\n    {}", c.tag, l.display());
    }
    println!("\norder:");
    for r in a.first_round - 1..a.first_round - 1 + a.rounds {
        let order: Vec<&str> = p
            .cells
            .iter()
            .filter(|c| c.round == r)
            .map(|c| cfg.columns[c.column].tag.as_str())
            .collect();
        println!("  round {}: {}", r + 1, order.join(", "));
    }
    // The phase names, each as NAME makes it.
    let names = |name: fn(&str) -> String| {
        p.phases
            .iter()
            .map(|p| name(&p.name))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!("\nmeasured phases per VM: {}", names(|n| n.to_string()));
    if p.counting {
        println!(
            "untimed counting phases of stock QEMU's vIOMMU VMs ({} s each, its trace on; nothing is traced in the measured ones): {}",
            a.count_runtime,
            names(plan::count_phase_name)
        );
    }
    if a.breakdown {
        println!(
            "untimed breakdown phases of every vIOMMU VM ({} s each, the host's tracefs recording its VMM's threads over the middle half; nothing is traced in the measured ones): {}",
            a.count_runtime,
            names(plan::breakdown_phase_name)
        );
    }
    if !p.pre.problems.is_empty() {
        println!(
            "\n{} prerequisite(s) missing (see above): a real run would stop here.",
            p.pre.problems.len()
        );
        return 2;
    }
    0
}

#[cfg(test)]
mod tests;
