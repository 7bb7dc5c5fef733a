//! A kernel's embedded config (CONFIG_IKCONFIG=y), read from the image
//! the way the kernel's `scripts/extract-ikconfig` reads it: the gzip'd
//! `.config` sits between the markers `IKCFG_ST` and `IKCFG_ED` in the
//! kernel's data, which in a bzImage is the compressed payload
//! (`vmlinux.bin.gz|xz|zst|lz4`) that the setup header locates.
//!
//! Formats read: gzip, xz (the kernel's xz has the x86 BCJ filter), zstd
//! (`zstd -22 --ultra`, a window of up to 128 MiB) and lz4 (the legacy
//! frame `lz4 -l` writes). bzip2, lzma and lzo payloads are named and not
//! read: such a kernel is then checked by a config file beside it, or by
//! the guest's first boot.

use std::io::{self, Read};
use std::path::Path;

/// Start marker of the embedded config with the gzip magic that follows it
/// (deflate), as `extract-ikconfig` searches it.
const START: &[u8] = b"IKCFG_ST\x1f\x8b\x08";
/// End marker of the embedded config.
const END: &[u8] = b"IKCFG_ED";
/// The largest embedded config (compressed) or config text believed: real
/// ones are tens of KiB compressed and a few hundred KiB of text.
const CONFIG_LIMIT: u64 = 16 << 20;
/// Block size of lz4's legacy frame (`lz4 -l`): every block decompresses to
/// at most this many bytes.
const LZ4_LEGACY_BLOCK: usize = 8 << 20;
/// Magic of lz4's legacy frame, little-endian.
const LZ4_LEGACY_MAGIC: u32 = 0x184c_2102;

/// Why a kernel's embedded config could not be read.
#[derive(Debug, thiserror::Error)]
pub enum IkconfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The kernel image.
        path: String,
        /// Why.
        source: io::Error,
    },
    /// A bzImage whose setup header is not one we can follow.
    #[error("its bzImage setup header {0}")]
    Header(String),
    /// A payload compressed in a format we do not read.
    #[error("its payload is compressed with {0}, which viommu-bench does not read (it reads gzip, xz, zstd and lz4: CONFIG_KERNEL_GZIP, _XZ, _ZSTD or _LZ4)")]
    Unsupported(String),
    /// The payload or the embedded config does not decompress.
    #[error("its {format} {what} does not decompress: {source}")]
    Corrupt {
        /// gzip, xz, zstd, lz4.
        format: &'static str,
        /// "payload" or "embedded config".
        what: &'static str,
        /// Why.
        source: io::Error,
    },
    /// The start marker without the end marker, or a config too large.
    #[error("its embedded config {0}")]
    Malformed(String),
}

/// The embedded config of the kernel image at `path`: `Ok(None)` when it
/// has none (a kernel built without CONFIG_IKCONFIG, or with it `=m`).
pub fn read_embedded_config(path: &Path) -> Result<Option<String>, IkconfigError> {
    let image = std::fs::read(path).map_err(|source| IkconfigError::Read {
        path: path.display().to_string(),
        source,
    })?;
    embedded_config(&image)
}

/// The embedded config of a kernel image: an uncompressed vmlinux (ELF)
/// is searched as it is, a bzImage's payload is decompressed and searched.
/// `Ok(None)` when the kernel has none.
pub fn embedded_config(image: &[u8]) -> Result<Option<String>, IkconfigError> {
    // A bzImage is read through its payload only: lz4 keeps incompressible
    // bytes as literals, so the markers may be visible in the compressed
    // data with the gzip member between them broken up.
    let Some(payload) = bzimage_payload(image)? else {
        return scan(image, "raw");
    };
    // Every compressor but gzip (which carries its own size) is followed
    // by the uncompressed size the kernel's size_append adds: 4 bytes that
    // are no part of the stream.
    let sized = &payload[..payload.len().saturating_sub(4)];
    let reader: (&'static str, Box<dyn Read + '_>) = if payload.starts_with(&[0x1f, 0x8b]) {
        ("gzip", Box::new(flate2::read::GzDecoder::new(payload)))
    } else if payload.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
        ("xz", Box::new(lzma_rust2::XzReader::new(sized, false)))
    } else if payload.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        let d =
            ruzstd::decoding::StreamingDecoder::new(sized).map_err(|e| IkconfigError::Corrupt {
                format: "zstd",
                what: "payload",
                source: io::Error::new(io::ErrorKind::InvalidData, e.to_string()),
            })?;
        ("zstd", Box::new(d))
    } else if payload.starts_with(&LZ4_LEGACY_MAGIC.to_le_bytes()) {
        ("lz4", Box::new(Lz4Legacy::new(&sized[4..])))
    } else {
        return Err(IkconfigError::Unsupported(format_name(payload)));
    };
    let (format, r) = reader;
    scan_reader(r, format)
}

/// The payload of a bzImage (the compressed vmlinux), `None` when `image`
/// is no bzImage (boot protocol magic `HdrS` at 0x202).
fn bzimage_payload(image: &[u8]) -> Result<Option<&[u8]>, IkconfigError> {
    if image.get(0x202..0x206) != Some(b"HdrS".as_slice()) {
        return Ok(None);
    }
    let u16_at = |o: usize| u16::from_le_bytes([image[o], image[o + 1]]);
    let u32_at = |o: usize| {
        image
            .get(o..o + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let version = u16_at(0x206);
    if version < 0x208 {
        return Err(IkconfigError::Header(format!(
            "is boot protocol {}.{:02}, older than 2.08 (no payload_offset)",
            version >> 8,
            version & 0xff
        )));
    }
    // setup_sects 0 means 4 (the boot protocol's compatibility rule).
    let sects = match image[0x1f1] {
        0 => 4,
        n => usize::from(n),
    };
    let (Some(off), Some(len)) = (u32_at(0x248), u32_at(0x24c)) else {
        return Err(IkconfigError::Header("is cut short".into()));
    };
    let start = (sects + 1) * 512 + off as usize;
    let end = start + len as usize;
    image.get(start..end).map(Some).ok_or_else(|| {
        IkconfigError::Header(format!(
            "places the payload at bytes {start}..{end}, past the file's {} bytes",
            image.len()
        ))
    })
}

/// The format a payload's first bytes name, for an error.
fn format_name(payload: &[u8]) -> String {
    if payload.starts_with(b"BZh") {
        "bzip2 (CONFIG_KERNEL_BZIP2)".into()
    } else if payload.starts_with(&[0x5d, 0, 0]) {
        "lzma (CONFIG_KERNEL_LZMA)".into()
    } else if payload.starts_with(&[0x89, b'L', b'Z', b'O']) {
        "lzo (CONFIG_KERNEL_LZO)".into()
    } else {
        let head: Vec<String> = payload.iter().take(6).map(|b| format!("{b:02x}")).collect();
        format!("an unknown format (first bytes {})", head.join(" "))
    }
}

/// The position of `needle` in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The embedded config in `data`, uncompressed kernel data.
fn scan(data: &[u8], format: &'static str) -> Result<Option<String>, IkconfigError> {
    scan_reader(data, format)
}

/// The embedded config in the kernel data `r` yields, read until its end
/// marker: the data before the start marker is not kept.
fn scan_reader(mut r: impl Read, format: &'static str) -> Result<Option<String>, IkconfigError> {
    let corrupt = |source| IkconfigError::Corrupt {
        format,
        what: "payload",
        source,
    };
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 1 << 20];
    let mut started = false;
    loop {
        let n = match r.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(corrupt(e)),
        };
        let mut old = buf.len();
        buf.extend_from_slice(&chunk[..n]);
        if !started {
            // Search the new bytes and the tail a marker could straddle.
            let from = old.saturating_sub(START.len() - 1);
            match find(&buf[from..], START) {
                Some(i) => {
                    buf.drain(..from + i);
                    started = true;
                    old = 0;
                }
                None => {
                    let keep = buf.len().saturating_sub(START.len() - 1);
                    buf.drain(..keep);
                    continue;
                }
            }
        }
        // The end marker in the new bytes (and the tail it could straddle),
        // after the start marker.
        let from = old.saturating_sub(END.len() - 1).max(START.len());
        if let Some(i) = find(&buf[from.min(buf.len())..], END) {
            return gunzip_config(&buf[START.len() - 3..from + i]).map(Some);
        }
        if buf.len() as u64 > CONFIG_LIMIT {
            return Err(IkconfigError::Malformed(format!(
                "runs past {CONFIG_LIMIT} bytes without its end marker IKCFG_ED"
            )));
        }
    }
    if started {
        return Err(IkconfigError::Malformed(
            "has its start marker IKCFG_ST but the kernel data ends before IKCFG_ED".into(),
        ));
    }
    Ok(None)
}

/// The config text of the gzip member `gz` (the bytes between the markers).
fn gunzip_config(gz: &[u8]) -> Result<String, IkconfigError> {
    let mut text = String::new();
    flate2::read::GzDecoder::new(gz)
        .take(CONFIG_LIMIT)
        .read_to_string(&mut text)
        .map_err(|source| IkconfigError::Corrupt {
            format: "gzip",
            what: "embedded config",
            source,
        })?;
    Ok(text)
}

/// lz4's legacy frame (after its magic): blocks of a 4-byte little-endian
/// compressed size and an LZ4 block of at most 8 MiB; the magic again
/// starts a new frame.
struct Lz4Legacy<'a> {
    data: &'a [u8],
    out: Vec<u8>,
    pos: usize,
}

impl<'a> Lz4Legacy<'a> {
    fn new(data: &'a [u8]) -> Self {
        Self {
            data,
            out: Vec::new(),
            pos: 0,
        }
    }

    /// Decompress the next block into `out`; false at the end.
    fn next_block(&mut self) -> io::Result<bool> {
        loop {
            let Some(head) = self.data.get(..4) else {
                return Ok(false);
            };
            let size = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
            self.data = &self.data[4..];
            if size == LZ4_LEGACY_MAGIC {
                continue;
            }
            let block = self.data.get(..size as usize).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("a block of {size} bytes with {} left", self.data.len()),
                )
            })?;
            self.data = &self.data[size as usize..];
            self.out.resize(LZ4_LEGACY_BLOCK, 0);
            let n = lz4_flex::block::decompress_into(block, &mut self.out)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
            self.out.truncate(n);
            self.pos = 0;
            return Ok(true);
        }
    }
}

impl Read for Lz4Legacy<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.out.len() {
            if !self.next_block()? {
                return Ok(0);
            }
        }
        let n = buf.len().min(self.out.len() - self.pos);
        buf[..n].copy_from_slice(&self.out[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests;
