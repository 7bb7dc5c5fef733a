//! Value parsers of the flags (clap `value_parser`s): sizes and ranges.

/// Parse `512M`, `2G`, `4096K`, `1073741824` (binary units; `MiB`/`GiB`
/// spellings accepted).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (digits, shift) = match t.char_indices().last() {
        Some((i, 'K' | 'k')) => (&t[..i], 10),
        Some((i, 'M' | 'm')) => (&t[..i], 20),
        Some((i, 'G' | 'g')) => (&t[..i], 30),
        Some((i, 'T' | 't')) => (&t[..i], 40),
        _ => (t, 0),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a size (examples: 512M, 2G, 1073741824)"))?;
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("{s:?} is too large"))
}

/// Parses `FIRST-LAST` (each hex with 0x, or decimal), FIRST <= LAST.
pub fn parse_range(s: &str) -> Result<(u64, u64), String> {
    let num = |x: &str| {
        let x = x.trim();
        match x.strip_prefix("0x").or_else(|| x.strip_prefix("0X")) {
            Some(h) => u64::from_str_radix(h, 16),
            None => x.parse(),
        }
        .map_err(|_| format!("{x:?} in {s:?} is not a number (examples: 0xfebf0000-0xfebf3fff)"))
    };
    let (a, b) = s
        .split_once('-')
        .ok_or_else(|| format!("{s:?} is not FIRST-LAST (example: 0xfebf0000-0xfebf3fff)"))?;
    let (a, b) = (num(a)?, num(b)?);
    if a > b {
        return Err(format!("{s:?}: FIRST is above LAST"));
    }
    Ok((a, b))
}

#[cfg(test)]
mod tests;

/// `N/SECS` of `--reboot-limit`: at most N restarts within SECS seconds
/// (both at least 1).
pub fn parse_reboot_limit(s: &str) -> Result<(u32, u64), String> {
    let err = || format!("{s:?}: expected N/SECS, e.g. 10/60 (at most N reboots in SECS seconds)");
    let (n, secs) = s.split_once('/').ok_or_else(err)?;
    let n: u32 = n.trim().parse().map_err(|_| err())?;
    let secs: u64 = secs.trim().parse().map_err(|_| err())?;
    if n == 0 || secs == 0 || secs > 86_400 {
        return Err(err());
    }
    Ok((n, secs))
}
