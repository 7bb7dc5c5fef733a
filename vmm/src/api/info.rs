//! What `GET /api/v1/vm.info` describes, and the [`ApiState`] the
//! machine serves.

use std::sync::{Arc, Mutex};

use super::liveness::Liveness;
use super::ApiState;
use crate::cli::VmConfig;
use crate::devices::exit::VmExit;
use crate::pci::Bdf;

/// What `GET /api/v1/vm.info` answers.
#[derive(Debug, serde::Serialize)]
struct VmInfo<'a> {
    cpus: u8,
    memory_bytes: u64,
    hugepages: bool,
    kernel: &'a std::path::Path,
    initrd: Option<&'a std::path::Path>,
    cmdline: &'a str,
    viommu: bool,
    lazy_unmap: bool,
    /// The bound of the request queue's poll window, in microseconds
    /// (`--viommu-poll-us`; 0: no polling).
    viommu_poll_us: Option<u128>,
    /// Who serves request-queue notifications (`--viommu-kicks`): "thread"
    /// or "vcpu".
    viommu_kicks: Option<&'static str>,
    /// Where the notify registers are offered first (`--viommu-notify`):
    /// "port" or "mmio".
    viommu_notify: Option<&'static str>,
    pool_hint: Option<PoolHintInfo>,
    vfio: Vec<VfioInfo<'a>>,
}

#[derive(Debug, serde::Serialize)]
struct PoolHintInfo {
    threshold: u32,
    pool_max: u64,
}

#[derive(Debug, serde::Serialize)]
struct VfioInfo<'a> {
    host: &'a str,
    guest: String,
    iommu_group: u32,
    /// The host DMA backend: "container" or "iommufd".
    backend: &'static str,
}

/// What the control plane answers from: `cfg` described, the virtio-iommu's
/// counters (if any) and the `liveness` gauges as metrics, shutdown through
/// `exit`; `vfio_bdfs` are the guest BDFs of `cfg.vfio`, in order.
pub fn state(
    cfg: &VmConfig,
    exit: &Arc<VmExit>,
    viommu: Option<Arc<Mutex<viommu_device::Counters>>>,
    liveness: Option<Liveness>,
    vfio_bdfs: &[Bdf],
) -> ApiState {
    let info = VmInfo {
        cpus: cfg.cpus,
        memory_bytes: cfg.memory,
        hugepages: cfg.hugepages,
        kernel: &cfg.kernel,
        initrd: cfg.initrd.as_deref(),
        cmdline: &cfg.cmdline,
        viommu: cfg.viommu,
        lazy_unmap: cfg.viommu && cfg.lazy_unmap,
        viommu_poll_us: cfg.viommu.then_some(cfg.viommu_poll.as_micros()),
        viommu_kicks: cfg.viommu.then_some(match cfg.viommu_kicks {
            crate::devices::viommu::KickServing::Thread => "thread",
            crate::devices::viommu::KickServing::Vcpu => "vcpu",
        }),
        viommu_notify: cfg.viommu.then_some(match cfg.viommu_notify {
            crate::devices::virtio::pci::NotifyRegister::Port => "port",
            crate::devices::virtio::pci::NotifyRegister::Mmio => "mmio",
        }),
        pool_hint: cfg
            .pool_hint
            .filter(|_| cfg.viommu)
            .map(|(threshold, pool_max)| PoolHintInfo {
                threshold,
                pool_max,
            }),
        vfio: cfg
            .vfio
            .iter()
            .zip(vfio_bdfs)
            .map(|(spec, b)| VfioInfo {
                host: &spec.bdf,
                guest: b.to_string(),
                iommu_group: spec.group,
                backend: spec.backend.name(),
            })
            .collect(),
    };
    let liveness = liveness.map(Arc::new);
    let probes = liveness.clone();
    let vcpus: crate::api::JsonFn = Box::new(move || {
        let probes = probes.clone();
        Box::pin(async move {
            match probes {
                Some(l) => l.vcpus_json().await,
                None => serde_json::Value::Array(Vec::new()),
            }
        })
    });
    let metrics = Box::new(move || {
        let mut text = match &viommu {
            Some(c) => {
                let c = *c.lock().unwrap_or_else(|e| e.into_inner());
                viommu_counters::prometheus_text("viommu", &c)
            }
            None => String::new(),
        };
        if let Some(l) = &liveness {
            text += &l.render();
        }
        text
    });
    ApiState {
        info: serde_json::to_value(&info).unwrap_or_default(),
        metrics,
        vcpus,
        exit: exit.clone(),
    }
}

#[cfg(test)]
mod tests;
