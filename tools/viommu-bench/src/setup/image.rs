//! The guest initramfs: busybox, fio and their shared libraries copied from
//! this host, plus the guest /init (guest/init), packed as an uncompressed
//! newc cpio and cached under a hash of everything that goes in.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};
use tracing::info;

/// The guest's /init, shipped inside the tool.
pub const INIT_SCRIPT: &str = include_str!("../../guest/init");

/// Building the image failed.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// A host program would not run.
    #[error("running {cmd}: {why}; install it or pass --initramfs PATH")]
    Tool {
        /// The command.
        cmd: String,
        /// What happened.
        why: String,
    },
    /// A file could not be read or written.
    #[error("{}: {source}; check the path and permissions (or pass --cache DIR)", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ImageError + '_ {
    move |source| ImageError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The libraries `ldd` lists (its stdout): `name => /path (addr)` and the
/// loader's own `/path (addr)` lines.
pub fn parse_ldd(out: &str) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for line in out.lines() {
        let line = line.trim();
        let path = match line.split_once("=>") {
            Some((_, rhs)) => rhs.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            let p = PathBuf::from(p);
            if !v.contains(&p) {
                v.push(p);
            }
        }
    }
    v
}

fn run(cmd: &str, args: &[&Path]) -> Result<std::process::Output, ImageError> {
    Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| ImageError::Tool {
            cmd: format!(
                "{cmd} {}",
                args.iter()
                    .map(|a| a.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
            why: e.to_string(),
        })
}

/// The shared libraries `bin` loads (none for a static binary).
fn libs_of(bin: &Path) -> Result<Vec<PathBuf>, ImageError> {
    let out = run("ldd", &[bin])?;
    // ldd exits 1 with "not a dynamic executable" for static binaries.
    Ok(parse_ldd(&String::from_utf8_lossy(&out.stdout)))
}

/// fio's engine plugins (`fio-*.so`, e.g. Fedora's `fio-libaio.so`),
/// which fio built with `--dynamic-libengines` loads at run time from a
/// directory compiled into it, so `ldd` never lists them. The directory is
/// found as an absolute path ending in `/fio` among the binary's strings,
/// else next to fio's prefix (`PREFIX/lib64/fio`, `PREFIX/lib/fio`,
/// `PREFIX/lib/x86_64-linux-gnu/fio`). Empty for a fio with built-in
/// engines (Debian's).
pub fn engine_plugins(fio: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Ok(bytes) = std::fs::read(fio) {
        for s in bytes.split(|b| *b == 0) {
            if s.first() == Some(&b'/') && s.ends_with(b"/fio") && s.len() < 4096 {
                if let Ok(t) = std::str::from_utf8(s) {
                    dirs.push(PathBuf::from(t));
                }
            }
        }
    }
    if let Some(prefix) = fio.parent().and_then(Path::parent) {
        for l in ["lib64/fio", "lib/fio", "lib/x86_64-linux-gnu/fio"] {
            dirs.push(prefix.join(l));
        }
    }
    let mut plugins = Vec::new();
    for d in dirs {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        let mut found: Vec<PathBuf> = rd
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| {
                let n = p
                    .file_name()
                    .map(|n| n.to_string_lossy())
                    .unwrap_or_default();
                n.ends_with(".so") && p.is_file()
            })
            .collect();
        found.sort();
        for p in found {
            if !plugins.contains(&p) {
                plugins.push(p);
            }
        }
    }
    plugins
}

/// A newc ("070701") cpio archive written in memory.
#[derive(Debug, Default)]
pub struct Cpio {
    buf: Vec<u8>,
    ino: u32,
}

impl Cpio {
    fn entry(&mut self, name: &str, mode: u32, data: &[u8], rdev: (u32, u32)) {
        self.ino += 1;
        let name = name.trim_start_matches('/');
        let fields = [
            self.ino,
            mode,
            0,
            0,
            1,
            0,
            data.len() as u32,
            0,
            0,
            rdev.0,
            rdev.1,
            name.len() as u32 + 1,
            0,
        ];
        self.buf.extend_from_slice(b"070701");
        for f in fields {
            self.buf.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(0);
        self.pad();
        self.buf.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.buf.len().is_multiple_of(4) {
            self.buf.push(0);
        }
    }

    /// A directory.
    pub fn dir(&mut self, name: &str) {
        self.entry(name, 0o040755, &[], (0, 0));
    }
    /// A regular file with `mode` permission bits.
    pub fn file(&mut self, name: &str, perm: u32, data: &[u8]) {
        self.entry(name, 0o100000 | perm, data, (0, 0));
    }
    /// A symlink to `target`.
    pub fn symlink(&mut self, name: &str, target: &str) {
        self.entry(name, 0o120777, target.as_bytes(), (0, 0));
    }
    /// A character device node.
    pub fn chardev(&mut self, name: &str, perm: u32, major: u32, minor: u32) {
        self.entry(name, 0o020000 | perm, &[], (major, minor));
    }
    /// The archive with its trailer.
    pub fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, &[], (0, 0));
        self.buf
    }
}

/// Everything that goes into the image.
#[derive(Debug, Clone)]
pub struct ImageInputs {
    /// busybox on the host.
    pub busybox: PathBuf,
    /// Its applet names (`busybox --list`).
    pub applets: Vec<String>,
    /// fio on the host.
    pub fio: PathBuf,
    /// fio's engine plugins (see [`engine_plugins`]), at their host paths.
    pub plugins: Vec<PathBuf>,
    /// Libraries of both (and of the plugins).
    pub libs: Vec<PathBuf>,
    /// The guest /init.
    pub init: String,
}

impl ImageInputs {
    /// Ask the host: applets of `busybox`, libraries of both programs.
    pub fn gather(busybox: &Path, fio: &Path) -> Result<ImageInputs, ImageError> {
        let out = run(&busybox.to_string_lossy(), &[Path::new("--list")])?;
        let applets: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.trim().to_string())
            .filter(|l| !l.is_empty() && !l.contains('/'))
            .collect();
        if applets.is_empty() {
            return Err(ImageError::Tool {
                cmd: format!("{} --list", busybox.display()),
                why: "listed no applets".into(),
            });
        }
        let plugins = engine_plugins(fio);
        let mut libs = libs_of(busybox)?;
        for bin in std::iter::once(fio).chain(plugins.iter().map(PathBuf::as_path)) {
            for l in libs_of(bin)? {
                if !libs.contains(&l) {
                    libs.push(l);
                }
            }
        }
        Ok(ImageInputs {
            busybox: busybox.into(),
            applets,
            fio: fio.into(),
            plugins,
            libs,
            init: INIT_SCRIPT.into(),
        })
    }

    /// A short key over every input's contents.
    pub fn key(&self) -> Result<String, ImageError> {
        let mut h = Sha256::new();
        h.update(format!(
            "viommu-bench image v1 {}\n",
            env!("CARGO_PKG_VERSION")
        ));
        h.update(self.init.as_bytes());
        h.update(self.applets.join(",").as_bytes());
        for p in [&self.busybox, &self.fio]
            .into_iter()
            .chain(&self.plugins)
            .chain(&self.libs)
        {
            h.update(p.to_string_lossy().as_bytes());
            h.update(std::fs::read(p).map_err(io(p))?);
        }
        Ok(h.finalize()
            .iter()
            .take(8)
            .map(|b| format!("{b:02x}"))
            .collect())
    }

    /// The archive.
    pub fn pack(&self) -> Result<Vec<u8>, ImageError> {
        let mut dirs: BTreeSet<String> = [
            "bin", "sbin", "dev", "proc", "sys", "tmp", "etc", "root", "usr", "usr/bin",
            "usr/sbin", "lib", "lib64",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for l in self.libs.iter().chain(&self.plugins) {
            let mut p = l.parent();
            while let Some(d) = p.filter(|d| *d != Path::new("/")) {
                dirs.insert(d.to_string_lossy().trim_start_matches('/').to_string());
                p = d.parent();
            }
        }
        let mut c = Cpio::default();
        for d in &dirs {
            c.dir(d);
        }
        c.chardev("dev/console", 0o600, 5, 1);
        c.chardev("dev/null", 0o666, 1, 3);
        c.file(
            "bin/busybox",
            0o755,
            &std::fs::read(&self.busybox).map_err(io(&self.busybox))?,
        );
        for a in self.applets.iter().filter(|a| *a != "busybox") {
            c.symlink(&format!("bin/{a}"), "busybox");
        }
        c.file(
            "usr/bin/fio",
            0o755,
            &std::fs::read(&self.fio).map_err(io(&self.fio))?,
        );
        for l in self.libs.iter().chain(&self.plugins) {
            c.file(
                &l.to_string_lossy(),
                0o755,
                &std::fs::read(l).map_err(io(l))?,
            );
        }
        c.file("init", 0o755, self.init.as_bytes());
        Ok(c.finish())
    }
}

/// The cached image for these inputs in `cache`, built first if missing.
pub fn build_or_reuse(inputs: &ImageInputs, cache: &Path) -> Result<PathBuf, ImageError> {
    let path = cache.join(format!("initramfs-{}.cpio", inputs.key()?));
    if path.is_file() {
        info!("guest image: reusing {}", path.display());
        return Ok(path);
    }
    std::fs::create_dir_all(cache).map_err(io(cache))?;
    let tmp = path.with_extension("cpio.tmp");
    std::fs::write(&tmp, inputs.pack()?).map_err(io(&tmp))?;
    std::fs::rename(&tmp, &path).map_err(io(&path))?;
    info!("guest image: built {}", path.display());
    Ok(path)
}

/// `/var/cache/viommu-bench` as root, else `$XDG_CACHE_HOME/viommu-bench`
/// or `~/.cache/viommu-bench` (see [`crate::setup::host::default_cache_for`]).
pub fn default_cache() -> PathBuf {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    crate::setup::host::default_cache_for(
        euid,
        std::env::var_os("XDG_CACHE_HOME").as_deref(),
        std::env::var_os("HOME").as_deref(),
    )
}

#[cfg(test)]
mod tests;
