//! Whether a guest's place in its host's sequence moved its result, and
//! how much one guest boot varies on its own.
//!
//! Every cell (one guest boot) gets a factor: over the timed phases it
//! measured, the geometric mean of its IOPS over its column's geometric
//! mean in that phase across all rounds. A factor of 1.2 is a guest that
//! ran 20% faster than its column usually does, in every phase alike.
//!
//! - **By place**: the factors of the guests that ran first, second, ...
//!   on their host, each place's geometric mean with its 95% t interval.
//!   An order effect (the host warming up, or earlier guests leaving it
//!   fragmented) shows as places whose intervals exclude 1 or a trend
//!   down the table; a flat table with wide intervals is noise.
//! - **Noise**: the factors split three ways: the host's (a round's mean
//!   factor: cancels out of every ratio within a round), the guest's own
//!   (a factor less its round's mean: does not cancel, and moves every
//!   phase of that guest together), and the phase's (what is left within
//!   one guest). A ratio of two columns in one round carries the guest
//!   and phase parts of both.
//! - **Huge pages**: where the cells recorded how much of each guest's RAM
//!   the host backed with transparent huge pages, that share's spread and
//!   its correlation with the guest's own part: a host whose huge pages
//!   change what a guest's memory costs shows as a correlation far from 0.

use serde::{Deserialize, Serialize};

use crate::plan::{is_untimed_phase, Phase};
use crate::report::cells::cell_iops;
use crate::report::stats::RatioTest;
use crate::run::results::CellResult;

/// The guests that ran at one place on their hosts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlaceRow {
    /// 0 = the first guest its host ran.
    pub place: u32,
    /// Guests (cells) at this place with a factor.
    pub guests: usize,
    /// The geometric mean of their factors.
    pub factor: f64,
    /// The 95% t interval of that mean (None with one guest).
    pub low: Option<f64>,
    /// Upper end of it.
    pub high: Option<f64>,
}

/// The run's noise, each part as a standard deviation of the natural log
/// of IOPS (0.10 is about 10%).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Noise {
    /// Guests with a factor.
    pub guests: usize,
    /// Rounds (hosts) they ran in.
    pub rounds: usize,
    /// Between hosts: the sd of the rounds' mean log factors.
    pub host: f64,
    /// A guest's own: the sd of log factors less their round's mean.
    pub guest: f64,
    /// A phase's: the sd of a phase's log ratio less its guest's factor.
    pub phase: f64,
    /// The guests' RAM in transparent huge pages, where recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thp: Option<ThpLink>,
}

/// How much of each guest's RAM was in transparent huge pages, and how
/// that went with the guest's own part of the noise.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ThpLink {
    /// Guests whose share was recorded.
    pub guests: usize,
    /// The shares' median, smallest and largest (0-1: peak huge-page
    /// guest RAM over peak resident guest RAM).
    pub median: f64,
    /// Smallest share.
    pub min: f64,
    /// Largest share.
    pub max: f64,
    /// Pearson's r between a guest's share and its log factor less its
    /// round's mean (None when either does not vary).
    pub r: Option<f64>,
}

/// One guest boot (cell) with a factor.
struct Guest<'a> {
    round: u32,
    /// Its place on its host, where recorded.
    place: Option<u32>,
    /// Its log factor: the mean of its per-phase log deviations.
    log_factor: f64,
    /// Those deviations.
    devs: &'a [f64],
    /// Its RAM's huge-page share, where recorded.
    thp_share: Option<f64>,
}

/// The share of a cell's resident guest RAM in transparent huge pages,
/// None when the cell did not record it.
fn thp_share(c: &CellResult) -> Option<f64> {
    let f = c.footprint.as_ref()?;
    (f.peak_guest_rss_kib > 0)
        .then(|| (f.peak_guest_thp_kib as f64 / f.peak_guest_rss_kib as f64).min(1.0))
}

/// Pearson's correlation of the pairs; None with fewer than 3 or no
/// variation in either.
fn pearson(xy: &[(f64, f64)]) -> Option<f64> {
    if xy.len() < 3 {
        return None;
    }
    let n = xy.len() as f64;
    let (mx, my) = (
        xy.iter().map(|p| p.0).sum::<f64>() / n,
        xy.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let sxy: f64 = xy.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = xy.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let syy: f64 = xy.iter().map(|p| (p.1 - my).powi(2)).sum();
    (sxx > 1e-12 && syy > 1e-12).then(|| sxy / (sxx * syy).sqrt())
}

/// Each cell's per-phase log deviations from its column's mean in that
/// phase (phases with two or more usable cells of the column).
fn deviations(phases: &[Phase], cells: &[CellResult]) -> Vec<Vec<f64>> {
    let mut out = vec![Vec::new(); cells.len()];
    let timed = phases.iter().filter(|p| !is_untimed_phase(&p.name));
    for ph in timed {
        let mut tags: Vec<&str> = cells.iter().map(|c| c.column.as_str()).collect();
        tags.sort_unstable();
        tags.dedup();
        for tag in tags {
            let logs: Vec<(usize, f64)> = cells
                .iter()
                .enumerate()
                .filter(|(_, c)| c.column == tag)
                .filter_map(|(i, c)| cell_iops(c, &ph.name).map(|v| (i, v.ln())))
                .collect();
            if logs.len() < 2 {
                continue;
            }
            let mean = logs.iter().map(|l| l.1).sum::<f64>() / logs.len() as f64;
            for (i, l) in logs {
                out[i].push(l - mean);
            }
        }
    }
    out
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// The sample standard deviation of `v` about `center` with `lost`
/// degrees of freedom spent; None without any left.
fn sd_about(v: impl Iterator<Item = f64> + Clone, lost: usize) -> Option<f64> {
    let n = v.clone().count();
    (n > lost).then(|| (v.map(|x| x * x).sum::<f64>() / (n - lost) as f64).sqrt())
}

/// The by-place rows (places in order) and the noise split of `cells`
/// over `phases`; no rows without recorded places, no noise without two
/// rounds of two guests.
pub fn analyse(phases: &[Phase], cells: &[CellResult]) -> (Vec<PlaceRow>, Option<Noise>) {
    let devs = deviations(phases, cells);
    let guests: Vec<Guest> = cells
        .iter()
        .zip(&devs)
        .filter(|(_, d)| !d.is_empty())
        .map(|(c, d)| Guest {
            round: c.round,
            place: c.place.as_ref().map(|p| p.index),
            log_factor: mean(d),
            devs: d,
            thp_share: thp_share(c),
        })
        .collect();
    let mut places: Vec<u32> = guests.iter().filter_map(|g| g.place).collect();
    places.sort_unstable();
    places.dedup();
    let rows = places
        .into_iter()
        .map(|place| {
            let f: Vec<f64> = guests
                .iter()
                .filter(|g| g.place == Some(place))
                .map(|g| g.log_factor.exp())
                .collect();
            // The geometric mean and t interval of the factors: the
            // paired table's test, on factors instead of ratios.
            let t = RatioTest::of(&f);
            PlaceRow {
                place,
                guests: f.len(),
                factor: t.map_or(1.0, |t| t.ratio),
                low: t.and_then(|t| t.low),
                high: t.and_then(|t| t.high),
            }
        })
        .collect();
    (rows, noise(&guests))
}

fn noise(guests: &[Guest]) -> Option<Noise> {
    let mut rounds: Vec<u32> = guests.iter().map(|g| g.round).collect();
    rounds.sort_unstable();
    rounds.dedup();
    if rounds.len() < 2 || guests.len() < rounds.len() * 2 {
        return None;
    }
    let means: Vec<f64> = rounds
        .iter()
        .map(|r| {
            let f: Vec<f64> = guests
                .iter()
                .filter(|g| g.round == *r)
                .map(|g| g.log_factor)
                .collect();
            mean(&f)
        })
        .collect();
    let round_mean = |r: u32| rounds.binary_search(&r).map_or(0.0, |i| means[i]);
    let grand = mean(&means);
    let host = sd_about(means.iter().map(|m| m - grand), 1)?;
    let guest = sd_about(
        guests.iter().map(|g| g.log_factor - round_mean(g.round)),
        rounds.len(),
    )?;
    let phase = sd_about(
        guests
            .iter()
            .flat_map(|g| g.devs.iter().map(move |d| d - g.log_factor)),
        guests.len(),
    )
    .unwrap_or(0.0);
    let own: Vec<(f64, f64)> = guests
        .iter()
        .filter_map(|g| {
            g.thp_share
                .map(|share| (share, g.log_factor - round_mean(g.round)))
        })
        .collect();
    let thp = (!own.is_empty()).then(|| {
        let mut shares: Vec<f64> = own.iter().map(|p| p.0).collect();
        shares.sort_by(f64::total_cmp);
        ThpLink {
            guests: shares.len(),
            median: shares[shares.len() / 2],
            min: shares[0],
            max: shares[shares.len() - 1],
            r: pearson(&own),
        }
    });
    Some(Noise {
        guests: guests.len(),
        rounds: rounds.len(),
        host,
        guest,
        phase,
        thp,
    })
}

/// Column heads of the by-place table.
pub const HEADER: [&str; 3] = [
    "place on its host",
    "guests",
    "IOPS x its column's usual [95%]",
];

/// The table's cells of one row.
pub fn cells(r: &PlaceRow) -> Vec<String> {
    let interval = match (r.low, r.high) {
        (Some(l), Some(h)) => format!(" [{l:.2}, {h:.2}]"),
        _ => String::new(),
    };
    vec![
        format!("{}", r.place + 1),
        r.guests.to_string(),
        format!("{:.2}{interval}", r.factor),
    ]
}

/// What the table is.
pub const NOTE: &str = "By place on the host (each guest's IOPS over its column's geometric mean in the same phase, averaged over the guest's timed phases: its factor; per place, the factors' geometric mean and its 95% t interval; an order effect shows as places whose interval excludes 1 or a trend down the places)";

/// The noise line under the by-place table.
pub fn noise_text(n: &Noise) -> String {
    let pct = |sd: f64| (sd.exp() - 1.0) * 100.0;
    format!(
        "Noise ({} guests in {} rounds, standard deviations of log IOPS): between hosts {:.0}% (cancels out of every ratio within a round), a guest's own {:.0}% (moves all of one guest's phases together; does not cancel), a phase's {:.0}% (within one guest). One round's ratio of two columns carries both guests' own and phase parts: about {:.0}%.",
        n.guests,
        n.rounds,
        pct(n.host),
        pct(n.guest),
        pct(n.phase),
        pct((2.0 * (n.guest.powi(2) + n.phase.powi(2))).sqrt()),
    ) + &n.thp.map(|t| thp_text(&t)).unwrap_or_default()
}

/// The huge-page sentence of the noise line.
fn thp_text(t: &ThpLink) -> String {
    let r = t.r.map_or("r undefined: no spread".to_string(), |r| {
        format!("r = {r:.2}")
    });
    format!(
        " Guest RAM in transparent huge pages ({} guests): median {:.0}%, {:.0}-{:.0}%; against a guest's own part: {r}.",
        t.guests,
        t.median * 100.0,
        t.min * 100.0,
        t.max * 100.0,
    )
}

#[cfg(test)]
mod tests;
