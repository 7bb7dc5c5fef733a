use super::*;
use std::sync::Arc;

extern "C" fn noop(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {}

#[test]
fn a_kicked_vcpu_thread_answers() {
    let sig = libc::SIGRTMIN();
    vmm_sys_util::signal::register_signal_handler(sig, noop).unwrap();
    let p = Arc::new(VcpuProbe::default());
    let stop = Arc::new(AtomicBool::new(false));
    let t = {
        let (p, stop) = (p.clone(), stop.clone());
        std::thread::spawn(move || {
            p.register_thread();
            let mut n = 0;
            while !stop.load(Ordering::Acquire) {
                if p.asked() {
                    n += 1;
                    p.put(Some(VcpuSample {
                        rip: 0xffff_ffff_8100_0000 + n,
                        rsp: 0,
                        rflags: 2,
                        cs: 0x10,
                        cr3: 0,
                        stack_text: Vec::new(),
                    }));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    while p.tid.load(Ordering::Acquire) == 0 {
        std::thread::yield_now();
    }
    let a = p.sample(sig, Duration::from_secs(5)).unwrap();
    let b = p.sample(sig, Duration::from_secs(5)).unwrap();
    assert_eq!(
        (a.rip & 0xff, b.rip & 0xff),
        (1, 2),
        "a fresh sample each time"
    );
    stop.store(true, Ordering::Release);
    t.join().unwrap();
}

#[test]
fn only_kernel_text_words_up_to_the_page_end_are_kept() {
    let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 0x4000)]).unwrap();
    let words: [u64; 4] = [
        0x1234,
        0xffff_ffff_8123_4567,
        0xffff_8880_0000_1000,
        u64::MAX,
    ];
    for (i, w) in words.iter().enumerate() {
        mem.write_obj(*w, GuestAddress(0x1fe0 + 8 * i as u64))
            .unwrap();
    }
    // A word of the next page that must not be read.
    mem.write_obj(0xffff_ffff_8100_0000u64, GuestAddress(0x2000))
        .unwrap();
    assert_eq!(kernel_words(&mem, 0x1fe0), vec![0xffff_ffff_8123_4567]);
    assert!(kernel_words(&mem, 0x10_0000).is_empty(), "outside RAM");
}

#[test]
fn an_unstarted_vcpu_gives_no_sample() {
    let p = VcpuProbe::default();
    assert_eq!(p.sample(libc::SIGRTMIN(), Duration::from_millis(50)), None);
    assert!(!p.want.load(Ordering::Acquire), "nothing left asked");
}
