//! A distribution kernel's drivers as modules: the release its bzImage
//! names, its modules directory (`/lib/modules/RELEASE`), the modules the
//! guest needs in `modules.dep` order, decompressed (`.ko.xz`, `.ko.zst`,
//! `.ko.gz`) and appended to the guest image as `/modules/*.ko` with
//! `/modules/order`, which the guest's /init loads with `insmod` before it
//! looks for the NVMe.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::setup::image::Cpio;

/// The options the guest may have as modules, with the module each
/// builds; loaded in this order (virtio-pci carries the virtio-iommu, whose
/// driver must be there before the NVMe's deferred probe completes).
pub const MODULE_OPTIONS: &[(&str, &str)] = &[
    ("CONFIG_VIRTIO", "virtio"),
    ("CONFIG_VIRTIO_PCI", "virtio_pci"),
    ("CONFIG_VIRTIO_IOMMU", "virtio_iommu"),
    ("CONFIG_BLK_DEV_NVME", "nvme"),
];

/// A module that cannot be found, read or decompressed.
#[derive(Debug, thiserror::Error)]
pub enum ModulesError {
    /// A file could not be read or written.
    #[error("{}: {source}; check the path (or pass --modules DIR)", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The kernel's config has the option `=m` and `modules.dep` has no
    /// such module.
    #[error("{dir}/modules.dep has no module {module} ({option}=m in the kernel's config): pass the kernel's own modules directory with --modules DIR")]
    Missing {
        /// The modules directory.
        dir: String,
        /// The module's name.
        module: String,
        /// The option.
        option: String,
    },
    /// A compressed module that does not decompress.
    #[error("{path}: does not decompress as {format}: {why}; reinstall the kernel's package")]
    Corrupt {
        /// The module file.
        path: String,
        /// xz, zstd, gzip.
        format: &'static str,
        /// Why.
        why: String,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ModulesError + '_ {
    move |source| ModulesError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The kernel release a bzImage names in its setup header (the string
/// `kernel_version` points to: `6.12.48+deb13-amd64 (debian-kernel@...)
/// #1 SMP ...`): its first word. `None` for another file.
pub fn kernel_release(image: &[u8]) -> Option<String> {
    if image.get(0x202..0x206) != Some(b"HdrS".as_slice()) {
        return None;
    }
    let off = u16::from_le_bytes([*image.get(0x20e)?, *image.get(0x20f)?]);
    if off == 0 {
        return None;
    }
    let text = image.get(0x200 + usize::from(off)..)?;
    let end = text.iter().position(|b| *b == 0).unwrap_or(text.len());
    let word = std::str::from_utf8(&text[..end.min(256)])
        .ok()?
        .split_whitespace()
        .next()?;
    Some(word.to_string())
}

/// The modules directory of kernel release `release` booted from
/// `kernel`: `over` (`--modules DIR`: the directory itself, holding
/// `modules.dep`, or its parent holding `RELEASE/`), else
/// `lib/modules/RELEASE` or `usr/lib/modules/RELEASE` beside the
/// kernel's `boot/` (an unpacked kernel package), else the host's
/// `/lib/modules/RELEASE`.
pub fn modules_dir(kernel: &Path, release: &str, over: Option<&Path>) -> Option<PathBuf> {
    // A package's tree has no modules.dep (depmod runs when it is
    // installed): its kernel/ directory will do.
    let has_dep = |d: &Path| d.join("modules.dep").is_file() || d.join("kernel").is_dir();
    if let Some(o) = over {
        return [o.to_path_buf(), o.join(release)]
            .into_iter()
            .find(|d| has_dep(d));
    }
    let mut c = Vec::new();
    if let Some(top) = kernel.parent().and_then(Path::parent) {
        c.push(top.join("lib/modules").join(release));
        c.push(top.join("usr/lib/modules").join(release));
    }
    c.push(Path::new("/lib/modules").join(release));
    c.into_iter().find(|d| has_dep(d))
}

/// A module's name from its path: the file name without `.ko` and its
/// compression suffix, `-` as `_` (as modprobe matches them).
pub fn module_name(path: &str) -> String {
    let base = path.rsplit('/').next().unwrap_or(path);
    let stem = [".ko.xz", ".ko.zst", ".ko.gz", ".ko"]
        .iter()
        .find_map(|s| base.strip_suffix(s))
        .unwrap_or(base);
    stem.replace('-', "_")
}

/// `modules.dep`: each module's path (relative to the modules
/// directory) and the paths of the modules it needs, by module name.
pub fn parse_modules_dep(text: &str) -> BTreeMap<String, (String, Vec<String>)> {
    text.lines()
        .filter_map(|l| {
            let (path, deps) = l.split_once(':')?;
            let path = path.trim();
            (!path.is_empty()).then(|| {
                let deps = deps.split_whitespace().map(String::from).collect();
                (module_name(path), (path.to_string(), deps))
            })
        })
        .collect()
}

/// The paths of `wanted` and everything they need, each once, every
/// module after the modules it needs. `Err(name)`: a module (or a
/// dependency) `modules.dep` does not list.
pub fn load_order(
    dep: &BTreeMap<String, (String, Vec<String>)>,
    wanted: &[&str],
) -> Result<Vec<String>, String> {
    fn visit(
        dep: &BTreeMap<String, (String, Vec<String>)>,
        name: &str,
        out: &mut Vec<String>,
        depth: usize,
    ) -> Result<(), String> {
        let (path, deps) = dep.get(name).ok_or_else(|| name.to_string())?;
        if out.contains(path) || depth > 64 {
            return Ok(());
        }
        for d in deps {
            visit(dep, &module_name(d), out, depth + 1)?;
        }
        if !out.contains(path) {
            out.push(path.clone());
        }
        Ok(())
    }
    let mut out = Vec::new();
    for w in wanted {
        visit(dep, &w.replace('-', "_"), &mut out, 0)?;
    }
    Ok(out)
}

/// The modules (with their options) a kernel config has `=m` of
/// [`MODULE_OPTIONS`].
pub fn wanted_modules(config: &str) -> Vec<(&'static str, &'static str)> {
    MODULE_OPTIONS
        .iter()
        .copied()
        .filter(|(o, _)| config.lines().any(|l| l.trim() == format!("{o}=m")))
        .collect()
}

/// A module file's contents, decompressed by its suffix.
pub fn decompress(path: &str, data: &[u8]) -> Result<Vec<u8>, ModulesError> {
    let corrupt = |format, why: String| ModulesError::Corrupt {
        path: path.to_string(),
        format,
        why,
    };
    let mut out = Vec::new();
    if path.ends_with(".xz") {
        lzma_rust2::XzReader::new(data, true)
            .read_to_end(&mut out)
            .map_err(|e| corrupt("xz", e.to_string()))?;
    } else if path.ends_with(".zst") {
        ruzstd::decoding::StreamingDecoder::new(data)
            .map_err(|e| corrupt("zstd", e.to_string()))?
            .read_to_end(&mut out)
            .map_err(|e| corrupt("zstd", e.to_string()))?;
    } else if path.ends_with(".gz") {
        flate2::read::GzDecoder::new(data)
            .read_to_end(&mut out)
            .map_err(|e| corrupt("gzip", e.to_string()))?;
    } else {
        out = data.to_vec();
    }
    Ok(out)
}

/// The cpio layer of these modules (paths relative to `dir`):
/// `/modules/NAME.ko`, decompressed, and `/modules/order`, their file
/// names in load order.
pub fn modules_layer(dir: &Path, paths: &[String]) -> Result<Vec<u8>, ModulesError> {
    let mut c = Cpio::default();
    c.dir("modules");
    let mut order = String::new();
    for p in paths {
        let file = dir.join(p);
        let data = std::fs::read(&file).map_err(io(&file))?;
        let name = format!("{}.ko", module_name(p));
        c.file(
            &format!("modules/{name}"),
            0o644,
            &decompress(&file.display().to_string(), &data)?,
        );
        order += &format!("{name}\n");
    }
    c.file("modules/order", 0o644, order.as_bytes());
    Ok(c.finish())
}

/// The modules `config` (the kernel's) has `=m` among [`MODULE_OPTIONS`],
/// with their dependencies, in load order, from modules directory `dir`.
pub fn modules_for(dir: &Path, config: &str) -> Result<Vec<String>, ModulesError> {
    let wanted = wanted_modules(config);
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    let names: Vec<&str> = wanted.iter().map(|(_, m)| *m).collect();
    let dep_file = dir.join("modules.dep");
    let dep = if dep_file.is_file() {
        parse_modules_dep(&std::fs::read_to_string(&dep_file).map_err(io(&dep_file))?)
    } else {
        scan_depends(dir, &names)?
    };
    load_order(&dep, &names).map_err(|module| ModulesError::Missing {
        dir: dir.display().to_string(),
        option: wanted
            .iter()
            .find(|(_, m)| *m == module)
            .map_or("a dependency", |(o, _)| o)
            .to_string(),
        module,
    })
}

/// Every module file under `dir` (relative paths), by module name.
fn module_files(dir: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.join("kernel")];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else if let Ok(rel) = p.strip_prefix(dir) {
                let rel = rel.to_string_lossy().into_owned();
                if rel.contains(".ko") {
                    out.insert(module_name(&rel), rel);
                }
            }
        }
    }
    out
}

/// The `depends=` list of a module's `.modinfo` (module names).
pub fn modinfo_depends(ko: &[u8]) -> Vec<String> {
    ko.split(|b| *b == 0)
        .find_map(|f| f.strip_prefix(b"depends="))
        .map(|d| {
            String::from_utf8_lossy(d)
                .split(',')
                .filter(|n| !n.is_empty())
                .map(|n| n.replace('-', "_"))
                .collect()
        })
        .unwrap_or_default()
}

/// What `modules.dep` would say of `wanted` and what they need, read from
/// the modules themselves (their `depends=`) in a tree without it.
fn scan_depends(
    dir: &Path,
    wanted: &[&str],
) -> Result<BTreeMap<String, (String, Vec<String>)>, ModulesError> {
    let files = module_files(dir);
    let mut dep = BTreeMap::new();
    let mut todo: Vec<String> = wanted.iter().map(|w| w.replace('-', "_")).collect();
    while let Some(name) = todo.pop() {
        let Some(rel) = files.get(&name) else {
            continue;
        };
        if dep.contains_key(&name) {
            continue;
        }
        let file = dir.join(rel);
        let data = std::fs::read(&file).map_err(io(&file))?;
        let needs = modinfo_depends(&decompress(&file.display().to_string(), &data)?);
        let paths = needs.iter().filter_map(|n| files.get(n).cloned()).collect();
        todo.extend(needs);
        dep.insert(name, (rel.clone(), paths));
    }
    Ok(dep)
}

/// The guest image `base` with `layer` appended (the kernel unpacks
/// concatenated cpio archives in order), in `cache` under a hash of
/// both; with `dry`, only its path.
pub fn image_with_layer(
    base: &Path,
    layer: &[u8],
    cache: &Path,
    dry: bool,
) -> Result<PathBuf, ModulesError> {
    let base_bytes = std::fs::read(base).map_err(io(base))?;
    let mut h = Sha256::new();
    h.update(&base_bytes);
    h.update(layer);
    let key: String = h
        .finalize()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect();
    let path = cache.join(format!("initramfs-modules-{key}.cpio"));
    if dry || path.is_file() {
        return Ok(path);
    }
    std::fs::create_dir_all(cache).map_err(io(cache))?;
    let tmp = path.with_extension("cpio.tmp");
    let mut all = base_bytes;
    all.extend_from_slice(layer);
    std::fs::write(&tmp, all).map_err(io(&tmp))?;
    std::fs::rename(&tmp, &path).map_err(io(&path))?;
    Ok(path)
}

#[cfg(test)]
mod tests;
