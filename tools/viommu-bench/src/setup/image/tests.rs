use super::*;

#[test]
fn ldd_output() {
    let out = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x00007f)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n\tlibz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x00007f)\n";
    assert_eq!(
        parse_ldd(out),
        [
            PathBuf::from("/lib/x86_64-linux-gnu/libz.so.1"),
            PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
            PathBuf::from("/lib64/ld-linux-x86-64.so.2"),
        ]
    );
    assert!(parse_ldd("\tnot a dynamic executable\n").is_empty());
}

#[test]
fn fio_engine_plugins_go_into_the_image() {
    // Fedora's layout: /usr/bin/fio loads /usr/lib64/fio/fio-*.so,
    // a path compiled into the binary.
    let d = tempfile::tempdir().unwrap();
    let usr = d.path().join("usr");
    let engines = usr.join("lib64/fio");
    std::fs::create_dir_all(&engines).unwrap();
    std::fs::create_dir_all(usr.join("bin")).unwrap();
    let fio = usr.join("bin/fio");
    let mut bin = b"\x7fELF....\0".to_vec();
    bin.extend_from_slice(engines.to_string_lossy().as_bytes());
    bin.extend_from_slice(b"\0more\0");
    std::fs::write(&fio, bin).unwrap();
    for so in ["fio-libaio.so", "fio-rbd.so"] {
        std::fs::write(engines.join(so), so).unwrap();
    }
    std::fs::write(engines.join("README"), "not a plugin").unwrap();
    assert_eq!(
        engine_plugins(&fio),
        [engines.join("fio-libaio.so"), engines.join("fio-rbd.so")]
    );
    // Found next to the prefix too when the binary does not name the
    // directory (here: under lib/ instead).
    let other = tempfile::tempdir().unwrap();
    let lib = other.path().join("lib/fio");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::create_dir_all(other.path().join("bin")).unwrap();
    std::fs::write(lib.join("fio-libaio.so"), "x").unwrap();
    std::fs::write(other.path().join("bin/fio"), "fio").unwrap();
    assert_eq!(
        engine_plugins(&other.path().join("bin/fio")),
        [lib.join("fio-libaio.so")]
    );
    // Debian's fio has its engines built in: nothing to add.
    let plain = tempfile::tempdir().unwrap();
    std::fs::write(plain.path().join("fio"), "fio").unwrap();
    assert!(engine_plugins(&plain.path().join("fio")).is_empty());

    let bb = d.path().join("busybox");
    std::fs::write(&bb, "bb").unwrap();
    let inp = ImageInputs {
        busybox: bb,
        applets: vec!["sh".into()],
        fio: fio.clone(),
        plugins: engine_plugins(&fio),
        libs: vec![],
        init: INIT_SCRIPT.into(),
    };
    let entries = unpack(&inp.pack().unwrap());
    let at = |p: &Path| p.to_string_lossy().trim_start_matches('/').to_string();
    let so = entries
        .iter()
        .find(|e| e.0 == at(&engines.join("fio-libaio.so")))
        .expect("the plugin at its host path");
    assert_eq!(so.2, b"fio-libaio.so");
    assert!(entries
        .iter()
        .any(|e| e.0 == at(&engines) && e.1 == 0o040755));
    // A changed plugin makes a new image.
    let k = inp.key().unwrap();
    std::fs::write(engines.join("fio-libaio.so"), "v2").unwrap();
    assert_ne!(inp.key().unwrap(), k);
}

/// (name, mode, data) of every entry, read back.
fn unpack(b: &[u8]) -> Vec<(String, u32, Vec<u8>)> {
    let mut v = Vec::new();
    let mut i = 0;
    let hex = |s: &[u8]| u32::from_str_radix(std::str::from_utf8(s).unwrap(), 16).unwrap();
    loop {
        assert_eq!(&b[i..i + 6], b"070701");
        let f = |n: usize| hex(&b[i + 6 + 8 * n..i + 14 + 8 * n]);
        let (mode, size, namesize) = (f(1), f(6) as usize, f(11) as usize);
        let name_at = i + 110;
        let name = String::from_utf8(b[name_at..name_at + namesize - 1].to_vec()).unwrap();
        let data_at = (name_at + namesize).div_ceil(4) * 4;
        let data = b[data_at..data_at + size].to_vec();
        i = (data_at + size).div_ceil(4) * 4;
        if name == "TRAILER!!!" {
            return v;
        }
        v.push((name, mode, data));
    }
}

#[test]
fn cpio_reads_back() {
    let mut c = Cpio::default();
    c.dir("bin");
    c.file("bin/busybox", 0o755, b"ELF!!");
    c.symlink("bin/sh", "busybox");
    c.chardev("dev/console", 0o600, 5, 1);
    let e = unpack(&c.finish());
    assert_eq!(e[0], ("bin".into(), 0o040755, vec![]));
    assert_eq!(e[1], ("bin/busybox".into(), 0o100755, b"ELF!!".to_vec()));
    assert_eq!(e[2], ("bin/sh".into(), 0o120777, b"busybox".to_vec()));
    assert_eq!(e[3].1, 0o020600);
}

#[test]
fn image_has_init_and_libs_and_is_cached_by_content() {
    let d = tempfile::tempdir().unwrap();
    let bb = d.path().join("busybox");
    let fio = d.path().join("fio");
    let lib = d.path().join("lib/libfoo.so.1");
    std::fs::create_dir_all(lib.parent().unwrap()).unwrap();
    std::fs::write(&bb, "bb").unwrap();
    std::fs::write(&fio, "fio").unwrap();
    std::fs::write(&lib, "foo").unwrap();
    let mut inp = ImageInputs {
        busybox: bb,
        applets: vec!["sh".into(), "mount".into(), "busybox".into()],
        fio,
        plugins: vec![],
        libs: vec![lib.clone()],
        init: INIT_SCRIPT.into(),
    };
    let names: Vec<String> = unpack(&inp.pack().unwrap())
        .into_iter()
        .map(|e| e.0)
        .collect();
    for want in ["init", "bin/sh", "bin/mount", "usr/bin/fio", "dev/console"] {
        assert!(names.iter().any(|n| n == want), "{want} in {names:?}");
    }
    let libname = lib.to_string_lossy().trim_start_matches('/').to_string();
    assert!(names.contains(&libname));
    assert!(names.iter().any(|n| n == "bin/busybox"));
    let cache = d.path().join("cache");
    let a = build_or_reuse(&inp, &cache).unwrap();
    assert_eq!(build_or_reuse(&inp, &cache).unwrap(), a);
    inp.init.push_str("\n# changed\n");
    let b = build_or_reuse(&inp, &cache).unwrap();
    assert_ne!(a, b, "a changed init makes a new image");
    std::fs::write(&lib, "foo2").unwrap();
    assert_ne!(
        inp.key().unwrap(),
        b.file_stem().unwrap().to_string_lossy()[10..]
    );
}
