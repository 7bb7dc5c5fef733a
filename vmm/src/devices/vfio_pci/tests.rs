//! Config emulation, BARs and MSI-X against a fake VFIO device.

use super::*;

struct Fake {
    config: Mutex<[u8; 256]>,
    bar0: Mutex<Vec<u8>>,
    msix_fds: Mutex<Option<Vec<EventFd>>>,
}

impl Fake {
    fn new() -> Self {
        let mut c = [0u8; 256];
        c[0..4].copy_from_slice(&0x0010_1b36u32.to_le_bytes());
        c[0x10..0x14].copy_from_slice(&0x0000_000cu32.to_le_bytes()); // 64-bit prefetchable
        c[0x18..0x1c].copy_from_slice(&0x0000_c001u32.to_le_bytes()); // I/O BAR
        c[0x30..0x34].copy_from_slice(&0xfeb0_0000u32.to_le_bytes()); // ROM
        c[0x34] = 0x40;
        c[0x40..0x44].copy_from_slice(&0x0080_5005u32.to_le_bytes()); // MSI, next 0x50
        c[0x50..0x54].copy_from_slice(&0x0002_0011u32.to_le_bytes()); // MSI-X, 3 vectors
        c[0x54..0x58].copy_from_slice(&0x2000u32.to_le_bytes());
        c[0x58..0x5c].copy_from_slice(&0x3000u32.to_le_bytes());
        Fake {
            config: Mutex::new(c),
            bar0: Mutex::new(vec![0; 0x4000]),
            msix_fds: Mutex::new(None),
        }
    }
}

impl VfioRegions for Fake {
    fn read(&self, index: u32, buf: &mut [u8], offset: u64) {
        let o = offset as usize;
        match index {
            VFIO_PCI_CONFIG_REGION_INDEX => {
                buf.copy_from_slice(&self.config.lock().unwrap()[o..o + buf.len()])
            }
            0 => buf.copy_from_slice(&self.bar0.lock().unwrap()[o..o + buf.len()]),
            _ => buf.fill(0xff),
        }
    }
    fn write(&self, index: u32, buf: &[u8], offset: u64) {
        let o = offset as usize;
        match index {
            VFIO_PCI_CONFIG_REGION_INDEX => {
                self.config.lock().unwrap()[o..o + buf.len()].copy_from_slice(buf)
            }
            0 => self.bar0.lock().unwrap()[o..o + buf.len()].copy_from_slice(buf),
            _ => {}
        }
    }
    fn size(&self, index: u32) -> u64 {
        match index {
            0 => 0x4000,
            2 => 0x20,
            _ => 0,
        }
    }
    fn enable_msix(&self, fds: &[&EventFd]) -> std::io::Result<()> {
        let clones = fds
            .iter()
            .map(|f| f.try_clone())
            .collect::<Result<_, _>>()?;
        *self.msix_fds.lock().unwrap() = Some(clones);
        Ok(())
    }
    fn disable_msix(&self) -> std::io::Result<()> {
        *self.msix_fds.lock().unwrap() = None;
        Ok(())
    }
}

type Router = crate::pci::msix::RecordingRouter;

fn device() -> (VfioPciDevice, Arc<Fake>, Arc<Router>) {
    let fake = Arc::new(Fake::new());
    let router = Arc::new(Router::default());
    let d = VfioPciDevice::new(fake.clone(), router.clone()).unwrap();
    (d, fake, router)
}

#[test]
fn probes_memory_bars_and_msix() {
    let (d, fake, _) = device();
    assert_eq!(
        d.bars(),
        &[BarInfo {
            index: 0,
            size: 0x4000,
            is64: true,
            low_bits: 0xc
        }]
    );
    assert_eq!(
        probe_msix(&*fake),
        Some(MsixInfo {
            cap: 0x50,
            vectors: 3,
            table: (0, 0x2000),
            pba: (0, 0x3000)
        })
    );
}

#[test]
fn bars_are_emulated_rom_hidden_rest_passed_through() {
    let (mut d, fake, _) = device();
    d.set_bar_address(0, 0x1_c000_4000);
    assert_eq!(d.read_config(4), 0xc000_400c);
    assert_eq!(d.read_config(5), 0x1);
    // Sizing.
    d.write_config(4, 0, &[0xff; 4]);
    d.write_config(5, 0, &[0xff; 4]);
    assert_eq!(d.read_config(4), 0xffff_c00c);
    assert_eq!(d.read_config(5), 0xffff_ffff);
    d.write_config(4, 0, &0xc000_4000u32.to_le_bytes());
    d.write_config(5, 0, &1u32.to_le_bytes());
    assert_eq!(d.read_config(4), 0xc000_400c);
    // The I/O BAR and unused BARs read 0; the ROM is hidden.
    assert_eq!(d.read_config(6), 0);
    assert_eq!(d.read_config(12), 0);
    // The device's own BAR registers were never written.
    assert_eq!(fake.config.lock().unwrap()[0x10], 0x0c);
    // Command register goes to the device.
    d.write_config(1, 0, &[0x06, 0x00]);
    assert_eq!(fake.config.lock().unwrap()[4], 0x06);
    assert_eq!(d.read_config(0), 0x0010_1b36);
}

#[test]
fn msix_vectors_become_routed_irqfds_while_unmasked() {
    let (mut d, fake, router) = device();
    assert_eq!(d.gsis, vec![24, 25, 26]);
    // Program vector 1 through the BAR: the table is emulated.
    d.bar_write(0, 0x2010, &0xfee0_0000u32.to_le_bytes());
    d.bar_write(0, 0x2018, &0x45u32.to_le_bytes());
    assert_eq!(fake.bar0.lock().unwrap()[0x2018], 0, "table not forwarded");
    let mut b = [0u8; 4];
    d.bar_read(0, 0x2018, &mut b);
    assert_eq!(u32::from_le_bytes(b), 0x45);
    // Other BAR offsets are the device's.
    d.bar_write(0, 0x100, &[1, 2, 3, 4]);
    assert_eq!(&fake.bar0.lock().unwrap()[0x100..0x104], &[1, 2, 3, 4]);

    // Unmasked but MSI-X still disabled: nothing attached.
    d.bar_write(0, 0x201c, &0u32.to_le_bytes());
    assert!(!router.is_attached(25));
    // Enable MSI-X via message control (byte 3 of the capability dword).
    assert_eq!(d.read_config(0x50 / 4) >> 31, 0);
    d.write_config(0x50 / 4, 3, &[0x80]);
    assert_eq!(d.read_config(0x50 / 4) >> 16, 0x8002);
    let fds = fake
        .msix_fds
        .lock()
        .unwrap()
        .take()
        .expect("VFIO MSI-X enabled");
    assert_eq!(fds.len(), 3);
    assert!(router.is_attached(25));
    assert_eq!(router.routes.lock().unwrap()[&25], (0xfee0_0000, 0x45));
    assert!(!router.is_attached(24), "vector 0 still masked");

    // Vector 0 masked: a signal stays in its eventfd and shows in the PBA.
    fds[0].write(1).unwrap();
    let mut pba = [0u8; 8];
    d.bar_read(0, 0x3000, &mut pba);
    assert_eq!(pba[0], 1);
    // Reprogramming vector 1 re-routes it.
    d.bar_write(0, 0x2018, &0x46u32.to_le_bytes());
    assert_eq!(router.routes.lock().unwrap()[&25], (0xfee0_0000, 0x46));
    // Masking it detaches; the function mask detaches everything.
    d.bar_write(0, 0x201c, &1u32.to_le_bytes());
    assert!(!router.is_attached(25));
    d.bar_write(0, 0x201c, &0u32.to_le_bytes());
    assert!(router.is_attached(25));
    d.write_config(0x50 / 4, 3, &[0xc0]);
    assert!(!router.is_attached(25));
    d.write_config(0x50 / 4, 3, &[0x80]);
    assert!(router.is_attached(25));
    // Disable.
    d.write_config(0x50 / 4, 3, &[0x00]);
    assert!(!d.irq_enabled);
    assert!(!router.is_attached(25));
}

#[test]
fn mappable_ranges_skip_msix_pages() {
    // NVMe-like BAR0: registers and doorbells, MSI-X table at 0x2000, PBA at 0x3000.
    assert_eq!(
        mappable_ranges(0x4000, &[(0x2000, 0x30), (0x3000, 8)], None),
        vec![(0, 0x2000)]
    );
    // Table in the middle of a big BAR.
    assert_eq!(
        mappable_ranges(0x10_000, &[(0x8010, 0x100)], None),
        vec![(0, 0x8000), (0x9000, 0x7000)]
    );
    // Sparse areas from the kernel are honoured (and page-aligned inwards).
    assert_eq!(
        mappable_ranges(
            0x10_000,
            &[(0x8000, 0x10)],
            Some(&[(0x0, 0x3800), (0x7000, 0x9000)])
        ),
        vec![(0, 0x3000), (0x7000, 0x1000), (0x9000, 0x7000)]
    );
    assert_eq!(mappable_ranges(0x1000, &[(0, 0x10)], None), vec![]);
    assert_eq!(mappable_ranges(0x4000, &[], None), vec![(0, 0x4000)]);
}

#[test]
fn a_pba_read_on_a_filtered_vcpu_thread_makes_no_denied_call() {
    // The PBA is read on a vCPU thread, under the vCPU filter: a call it
    // denies ends this test process with the SIGSYS report (exit 159),
    // as it ended the VMM in the lab when a guest read the NVMe's PBA.
    let (mut d, fake, _) = device();
    d.write_config(0x50 / 4, 3, &[0x80]);
    let fds = fake.msix_fds.lock().unwrap().take().expect("MSI-X enabled");
    // Vectors 0 and 2 masked (the reset state) with a signal waiting in
    // vector 2's eventfd; vector 1 unmasked and attached.
    d.bar_write(0, 0x201c, &0u32.to_le_bytes());
    fds[2].write(1).unwrap();
    let filter = crate::seccomp::Policy::default()
        .filter(crate::seccomp::ThreadKind::Vcpu)
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let h = crate::seccomp::spawn("vcpu0", filter, move || {
        let mut pba = [0u8; 8];
        d.bar_read(0, 0x3000, &mut pba);
        let mut one = [0u8; 1];
        d.bar_read(0, 0x3000, &mut one);
        // The device goes back to be dropped: a debug build's fd drop
        // asserts with fcntl, which no filter allows.
        tx.send((pba, one, d)).unwrap();
    })
    .unwrap();
    h.join().unwrap();
    let (pba, one, _d) = rx.recv().unwrap();
    assert_eq!(pba, [0b100, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(one, [0b100], "reading does not consume the signal");
}

/// Runs `name` (a test of this file) in a child process with
/// `VFIO_NOFILE_CHILD` set: the open-file limit it lowers is the child's.
fn in_child(name: &str) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env("VFIO_NOFILE_CHILD", "1")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && text.contains("1 passed"), "{text}");
}

fn set_open_file_limit(soft: u64, hard: u64) {
    let r = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: setrlimit reads one rlimit, which we own.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) }, 0);
}

#[test]
fn many_vectors_raise_the_soft_open_file_limit() {
    if std::env::var_os("VFIO_NOFILE_CHILD").is_none() {
        return in_child("devices::vfio_pci::tests::many_vectors_raise_the_soft_open_file_limit");
    }
    let (_, hard) = open_file_limit().unwrap();
    if hard < 4096 {
        // This host's hard limit leaves no room to raise: the other test
        // covers the error.
        return;
    }
    set_open_file_limit(256, hard);
    let fds = vector_eventfds(2048).unwrap();
    assert_eq!(fds.len(), 2048);
    assert_eq!(open_file_limit().unwrap().0, hard);
}

#[test]
fn vectors_past_the_hard_open_file_limit_are_named() {
    if std::env::var_os("VFIO_NOFILE_CHILD").is_none() {
        return in_child(
            "devices::vfio_pci::tests::vectors_past_the_hard_open_file_limit_are_named",
        );
    }
    set_open_file_limit(128, 128);
    let e = vector_eventfds(300).unwrap_err().to_string();
    assert!(
        e.contains("300 MSI-X vectors")
            && e.contains("limit (128, the hard limit)")
            && e.contains("ulimit -n 512"),
        "{e}"
    );
}

mod decode;

/// A reboot's reset of a passed-through function's emulated state, after
/// `VFIO_DEVICE_RESET`: MSI-X off on the host, every vector detached and
/// masked with its message gone; the BARs where the VMM placed them; the
/// Memory Space state as the device has it (the kernel restores the
/// command register across its reset), so the next boot's driver turns
/// decode on as at the first boot.
#[test]
fn a_system_reset_turns_msix_off_and_detaches_every_vector() {
    let (mut d, fake, router) = device();
    d.set_bar_address(0, 0x1_c000_4000);
    // A first boot: vector 1 programmed and unmasked, MSI-X on.
    d.bar_write(0, 0x2010, &0xfee0_0000u32.to_le_bytes());
    d.bar_write(0, 0x2018, &0x45u32.to_le_bytes());
    d.bar_write(0, 0x201c, &0u32.to_le_bytes());
    d.write_config(0x50 / 4, 3, &[0x80]);
    assert!(d.irq_enabled && router.is_attached(25));
    assert!(fake.msix_fds.lock().unwrap().is_some());
    // The guest turns Memory Space off on its way down.
    d.write_config(1, 0, &[0x04, 0x00]);
    assert!(!d.decode.enabled());

    d.system_reset();

    // Off as the device has it, until the next boot's driver sets it.
    assert!(!d.decode.enabled());

    assert!(!d.irq_enabled);
    assert!(
        fake.msix_fds.lock().unwrap().is_none(),
        "MSI-X off on the host"
    );
    assert!((0..3).all(|v| !d.attached[v]) && !router.is_attached(25));
    assert_eq!(d.read_config(0x50 / 4) >> 30, 0, "enable and mask-all off");
    let mut b = [0u8; 4];
    d.write_config(1, 0, &[0x06, 0x00]); // the next boot's driver: decode on
    d.bar_read(0, 0x201c, &mut b);
    assert_eq!(u32::from_le_bytes(b), 1, "vector 1 masked");
    d.bar_read(0, 0x2018, &mut b);
    assert_eq!(u32::from_le_bytes(b), 0, "its message gone");
    assert_eq!((d.read_config(4), d.read_config(5)), (0xc000_400c, 0x1));
    // MSI-X on again: nothing attached until the driver programs a vector.
    d.write_config(0x50 / 4, 3, &[0x80]);
    assert!(d.irq_enabled && !router.is_attached(25));
}

/// Counts how often the watch asks.
#[derive(Default)]
struct AskedAttachments(std::sync::atomic::AtomicUsize);

impl Attachments for AskedAttachments {
    fn any_attached(&self) -> bool {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        false
    }
}

#[test]
fn bus_mastering_is_checked_against_the_viommu_once() {
    let (mut d, fake, _) = device();
    let asked = Arc::new(AskedAttachments::default());
    d.watch_bus_master(BusMasterWatch::new("0000:01:00.0".into(), asked.clone()));
    // Memory Space only: nothing to ask.
    d.write_config(1, 0, &[0x02, 0x00]);
    assert_eq!(asked.0.load(std::sync::atomic::Ordering::Relaxed), 0);
    // Bus mastering on, still passed to the device; asked (and warned) once.
    d.write_config(1, 0, &[0x06, 0x00]);
    d.write_config(1, 0, &[0x06, 0x00]);
    assert_eq!(fake.config.lock().unwrap()[4], 0x06);
    assert_eq!(asked.0.load(std::sync::atomic::Ordering::Relaxed), 1);
}
