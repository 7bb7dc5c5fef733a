//! Guest reboots in place: whether a reset restarts the guest or ends the
//! VMM (`--on-reboot`, `--on-triple-fault`), the bound on reboot loops
//! (`--reboot-limit N/SECS`), and the order of the reset steps.
//!
//! A reboot runs, on the main thread, with every vCPU parked out of
//! `KVM_RUN` ([`RebootSteps`] in [`run_steps`]'s order):
//! 1. quiesce the virtio-iommu: its device thread serves no more requests;
//! 2. reset each VFIO device (`VFIO_DEVICE_RESET`): its DMA stops;
//! 3. reset the virtio-iommu model (every endpoint detached, every host
//!    mapping unmapped in the planner's order, deferred unmaps included),
//!    then unmap-all on each endpoint's mapper (leftovers, as at exit);
//! 4. reset the virtio-pci transports (status 0, queues unset, MSI-X
//!    vectors cleared) and the platform devices;
//! 5. rewrite guest memory: the boot structures' low megabyte zeroed,
//!    kernel and initrd reloaded from their paths, ACPI tables, boot
//!    params, page tables and GDT written again;
//! 6. the vCPUs take their first-boot registers and run.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::devices::exit::ExitReason;

/// What a reboot-like event does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnReset {
    /// End the VMM (exit code 3 for a reboot, 4 for a triple fault).
    Exit,
    /// Restart the guest in this process.
    Restart,
}

/// Reboot handling of a VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RebootPolicy {
    /// On a guest reboot (reset register, i8042, API `reboot`).
    pub on_reboot: OnReset,
    /// On a triple fault.
    pub on_triple_fault: OnReset,
    /// More than `max` reboots within `window` end the VMM.
    pub max: u32,
    /// See `max`.
    pub window: Duration,
}

impl Default for RebootPolicy {
    /// Restart on a reboot, exit on a triple fault, at most 10 reboots a
    /// minute: the command line's defaults.
    fn default() -> Self {
        RebootPolicy {
            on_reboot: OnReset::Restart,
            on_triple_fault: OnReset::Exit,
            max: 10,
            window: Duration::from_secs(60),
        }
    }
}

/// What the main thread does with an exit request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Restart the guest; the cause, for the log.
    Restart(&'static str),
    /// End the VMM with this reason.
    Exit(ExitReason),
}

/// Reboots within the policy's window, to bound a reboot loop.
#[derive(Debug)]
pub struct RebootLimiter {
    policy: RebootPolicy,
    /// Times of the reboots within the window, oldest first; at most
    /// `max` + 1 entries.
    recent: VecDeque<Instant>,
}

impl RebootLimiter {
    /// No reboot yet.
    pub fn new(policy: RebootPolicy) -> Self {
        RebootLimiter {
            policy,
            recent: VecDeque::new(),
        }
    }

    /// Reboots counted in the window (for tests and logs).
    pub fn recent(&self) -> usize {
        self.recent.len()
    }

    /// What to do about `reason` at `now`.
    pub fn decide(&mut self, reason: ExitReason, now: Instant) -> Decision {
        let (cause, on) = match reason {
            ExitReason::Reset => ("guest reset", self.policy.on_reboot),
            ExitReason::ApiReboot => ("API reboot", self.policy.on_reboot),
            ExitReason::TripleFault => ("triple fault", self.policy.on_triple_fault),
            other => return Decision::Exit(other),
        };
        if on == OnReset::Exit {
            return Decision::Exit(reason);
        }
        while self
            .recent
            .front()
            .is_some_and(|t| now.duration_since(*t) >= self.policy.window)
        {
            self.recent.pop_front();
        }
        self.recent.push_back(now);
        if self.recent.len() > self.policy.max as usize {
            self.recent.pop_front();
            return Decision::Exit(ExitReason::Error(format!(
                "the guest rebooted more than {} times in {} s (last: {cause}); not restarting it (--reboot-limit)",
                self.policy.max,
                self.policy.window.as_secs()
            )));
        }
        Decision::Restart(cause)
    }
}

/// Why a reboot could not be done (the VMM then exits with code 1).
#[derive(Debug, thiserror::Error)]
pub enum RebootError {
    /// The vCPUs did not all leave `KVM_RUN` in time.
    #[error("the vCPUs did not stop for the reboot")]
    VcpusBusy,
    /// A device could not be reset.
    #[error("cannot reset {what}: {why}")]
    Device {
        /// Which device.
        what: &'static str,
        /// Why.
        why: String,
    },
    /// The guest could not be loaded again.
    #[error("cannot reload the guest: {0}")]
    Load(String),
}

/// The steps of a reboot, in the order [`run_steps`] takes them; the
/// machine implements them on KVM and VFIO, tests on fakes.
pub trait RebootSteps {
    /// Park every vCPU out of `KVM_RUN`.
    fn pause_vcpus(&mut self) -> Result<(), RebootError>;
    /// Stop the virtio-iommu serving requests (no host map call after this).
    fn quiesce_iommu(&mut self) -> Result<(), RebootError>;
    /// Reset each passed-through device: its DMA stops.
    fn reset_vfio(&mut self);
    /// Reset the virtio-iommu model (every domain and host mapping gone)
    /// and unmap all on each endpoint's mapper.
    fn drop_dma(&mut self) -> Result<(), RebootError>;
    /// Reset the transports and the platform devices.
    fn reset_devices(&mut self);
    /// Zero the boot structures' memory, reload kernel and initrd, write
    /// ACPI tables, boot params and boot page tables.
    fn reload_guest(&mut self) -> Result<(), RebootError>;
    /// Give the vCPUs their first-boot state and run them.
    fn resume_vcpus(&mut self) -> Result<(), RebootError>;
}

/// Run a reboot's steps in their one order; the first failure ends it.
pub fn run_steps(s: &mut impl RebootSteps) -> Result<(), RebootError> {
    s.pause_vcpus()?;
    s.quiesce_iommu()?;
    s.reset_vfio();
    s.drop_dma()?;
    s.reset_devices();
    s.reload_guest()?;
    s.resume_vcpus()
}

#[cfg(test)]
mod tests;
