//! A vCPU serving its own notification takes at most [`VCPU_SHARE`]:
//! large MAPs, ATTACH and what exceeds the share go to the device thread,
//! so a vCPU stops within the stop timeout and the release stays ordered.

use std::sync::atomic::AtomicBool;
use std::thread::JoinHandle;

use vmm_sys_util::signal::{register_signal_handler, SIGRTMIN};

use super::*;
use crate::machine::running::{Devices, Running};

const MIB: u64 = 1 << 20;

/// How many maps the thread named `name` made.
fn maps_by(mapper: &GateMapper, name: &str) -> usize {
    mapper
        .threads
        .lock()
        .unwrap()
        .iter()
        .filter(|n| *n == name)
        .count()
}

#[test]
fn a_vcpu_serves_its_share_and_leaves_the_rest_to_the_thread() {
    let mut r = rig_serving(PollWindow::new(Duration::ZERO), KickServing::Vcpu);
    until("the thread waits", || r.dev.commands_applied());
    attach_on_the_thread(&mut r);
    let me = std::thread::current().name().unwrap().to_string();
    assert_eq!(maps_by(&r.mapper, &me), 0);
    // 32 MAPs of 1 MiB (all the rig's queue holds): twice the share's bytes.
    let n = 32;
    for i in 0..n {
        let iova = 0x1000_0000 + i * MIB;
        let map = req::map(1, iova, iova + MIB - 1, DATA_BASE, req::RW);
        r.reqq.push(&r.mem, &map, 4).unwrap();
    }
    r.dev.queue_notify(0);
    let on_vcpu = maps_by(&r.mapper, &me);
    assert_eq!(on_vcpu as u64, VCPU_SHARE.bytes / MIB, "the vCPU's share");
    until("every map", || {
        r.mapper.inner.mappings().len() == n as usize
    });
    assert_eq!(maps_by(&r.mapper, "viommu"), n as usize - on_vcpu);
    assert_eq!(r.statuses(), vec![Some(0); n as usize]);
}

type Log = Arc<Mutex<Vec<String>>>;

/// The virtio-iommu's device thread as the device manager holds it: its
/// drop (the ordered release) logs whether it was disarmed, then opens
/// the gate and stops the thread.
struct ViommuRelease {
    thread: Option<DeviceThread>,
    mapper: Arc<GateMapper>,
    log: Log,
    armed: bool,
}

impl Devices for ViommuRelease {
    fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for ViommuRelease {
    fn drop(&mut self) {
        self.log
            .lock()
            .unwrap()
            .push(format!("released, armed {}", self.armed));
        self.mapper.open();
        if let Some(t) = self.thread.take() {
            t.stop();
        }
    }
}

extern "C" fn ignore_kick(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {}

/// A vCPU that notifies once, then runs until stopped.
fn vcpu(dev: Arc<Mutex<ViommuDevice>>, stop: Arc<AtomicBool>, log: Log) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name("vcpu0".into())
        .spawn(move || {
            dev.lock().unwrap().queue_notify(0);
            while !stop.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(1));
            }
            log.lock().unwrap().push("vcpu0 stopped".into());
        })
        .unwrap()
}

/// A MAP larger than the vCPU's share, with the host map blocked: the
/// vCPU leaves it to the device thread and returns, so the stop joins it
/// in time and the release runs armed (VFIO reset, ordered unmap), after
/// the vCPU stopped; the map completes before the thread is joined.
#[test]
fn a_vcpu_stops_in_time_while_the_thread_serves_a_large_map() {
    register_signal_handler(SIGRTMIN(), ignore_kick).unwrap();
    let mut r = rig_serving(PollWindow::new(Duration::ZERO), KickServing::Vcpu);
    until("the thread waits", || r.dev.commands_applied());
    attach_on_the_thread(&mut r);
    r.mapper.close();
    let big = req::map(
        1,
        0x1000_0000,
        0x1000_0000 + 64 * MIB - 1,
        DATA_BASE,
        req::RW,
    );
    r.reqq.push(&r.mem, &big, 4).unwrap();
    let Rig {
        mem,
        dev,
        thread,
        mapper,
        mut reqq,
        ..
    } = r;
    let log: Log = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let devices = ViommuRelease {
        thread,
        mapper: mapper.clone(),
        log: log.clone(),
        armed: true,
    };
    let mut running = Running::new(devices, stop.clone());
    let dev = Arc::new(Mutex::new(dev));
    running.push(vcpu(dev.clone(), stop, log.clone()));
    mapper.wait_for_waiter();
    assert!(running.finish(), "the vCPU did not stop");
    assert_eq!(
        *log.lock().unwrap(),
        vec!["vcpu0 stopped".to_string(), "released, armed true".into()]
    );
    assert_eq!(maps_by(&mapper, "vcpu0"), 0);
    assert_eq!(maps_by(&mapper, "viommu"), 1);
    assert_eq!(mapper.inner.mappings().len(), 1);
    let used: Vec<_> = reqq.poll(&mem).iter().map(|u| u.status).collect();
    assert_eq!(used, vec![Some(0)]);
}
