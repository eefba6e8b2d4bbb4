// SPDX-License-Identifier: GPL-2.0

//! The driver's debugfs as the scenarios read it: snapshots of the
//! object tables (CQ and QP rows, DMA regions), the wait for the
//! baseline, and the check for stalled EQs.

use std::time::{Duration, Instant};

use crate::sys::Res;

/// Objects the kernel lists in debugfs: CQ and QP rows per HCA, DMA
/// registry regions (queue and UAR pages; pinned user MRs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Objects {
    pub(crate) cqs: Vec<u64>,
    pub(crate) qps: Vec<u64>,
    dma_buf: u64,
    pub(crate) user_mr: u64,
    /// Devices whose backend counts what it holds (ConnectX functions,
    /// debugfs `rmlx5/objects`): (index, PDs + CQs + QPs + MRs + UARs).
    pub(crate) counted: Vec<(usize, u64)>,
}

impl Objects {
    /// Objects above `base`, component by component.
    pub(crate) fn excess_over(&self, base: &Objects) -> u64 {
        let pairs = |a: &[u64], b: &[u64]| -> u64 {
            a.iter()
                .enumerate()
                .map(|(i, v)| v.saturating_sub(b.get(i).copied().unwrap_or(0)))
                .sum()
        };
        let counted: u64 = self
            .counted
            .iter()
            .map(|(d, v)| {
                let b = base
                    .counted
                    .iter()
                    .find(|(x, _)| x == d)
                    .map_or(0, |(_, b)| *b);
                v.saturating_sub(b)
            })
            .sum();
        pairs(&self.cqs, &base.cqs)
            + pairs(&self.qps, &base.qps)
            + self.dma_buf.saturating_sub(base.dma_buf)
            + self.user_mr.saturating_sub(base.user_mr)
            + counted
    }

    pub(crate) fn describe(&self) -> String {
        format!(
            "cqs={:?} qps={:?} dma_buf={} user_mr={} counted={:?}",
            self.cqs, self.qps, self.dma_buf, self.user_mr, self.counted
        )
    }
}

/// Rows of a debugfs table (the first line is the header).
fn table_rows(text: &str) -> u64 {
    text.lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .count() as u64
}

/// A count of the `dma_regions` line of `stats` (`buf`, `kernel_mr`,
/// `user_mr`).
fn dma_field(stats: &str, name: &str) -> Option<u64> {
    let line = stats.lines().find(|l| l.starts_with("dma_regions "))?;
    let toks: Vec<&str> = line.split_whitespace().collect();
    toks.windows(2)
        .find(|w| w.first() == Some(&name))
        .and_then(|w| w.get(1))
        .and_then(|v| v.parse().ok())
}

pub(crate) fn debugfs(dev: usize, file: &str) -> Result<String, String> {
    let path = format!("/sys/kernel/debug/rmlx5/rmlx5_{dev}/{file}");
    std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))
}

/// The number of HCAs (`RMLX5_NUM_HCAS` from /init, else debugfs).
pub(crate) fn num_hcas() -> usize {
    if let Some(n) = std::env::var("RMLX5_NUM_HCAS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        return n.max(1);
    }
    std::fs::read_dir("/sys/kernel/debug/rmlx5")
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with("rmlx5_"))
                .count()
        })
        .unwrap_or(2)
        .max(1)
}

pub(crate) fn snapshot(n: usize) -> Result<Objects, String> {
    let mut o = Objects::default();
    for dev in 0..n {
        o.cqs.push(table_rows(&debugfs(dev, "cqs")?));
        o.qps.push(table_rows(&debugfs(dev, "qps")?));
    }
    // The DMA registry is the module's, shared by its HCAs.
    let stats = debugfs(0, "stats")?;
    o.dma_buf = dma_field(&stats, "buf").ok_or("stats: no dma_regions buf")?;
    o.user_mr = dma_field(&stats, "user_mr").ok_or("stats: no dma_regions user_mr")?;
    // An older module without the file counts nothing there.
    if let Ok(t) = std::fs::read_to_string("/sys/kernel/debug/rmlx5/objects") {
        o.counted = counted_objects(&t);
    }
    Ok(o)
}

/// The lines of `rmlx5/objects` (`rmlx5_<n> pd A cq B qp C mr D uar E`):
/// each device's index and the sum of its counts.
fn counted_objects(text: &str) -> Vec<(usize, u64)> {
    text.lines()
        .filter_map(|l| {
            let mut t = l.split_whitespace();
            let dev = t.next()?.strip_prefix("rmlx5_")?.parse().ok()?;
            let sum = t.filter_map(|x| x.parse::<u64>().ok()).sum();
            Some((dev, sum))
        })
        .collect()
}

/// What a ConnectX function holds for its users, kind by kind, as its
/// line of `rmlx5/objects` counts the commands that made and destroyed
/// them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct FnObjects {
    pub(crate) pds: u64,
    pub(crate) cqs: u64,
    pub(crate) qps: u64,
    /// Memory keys.
    pub(crate) mrs: u64,
    /// UAR pages (one per open context).
    pub(crate) uars: u64,
}

impl FnObjects {
    /// The sum of `self` and `o`, kind by kind.
    pub(crate) fn plus(&self, o: &FnObjects) -> FnObjects {
        FnObjects {
            pds: self.pds + o.pds,
            cqs: self.cqs + o.cqs,
            qps: self.qps + o.qps,
            mrs: self.mrs + o.mrs,
            uars: self.uars + o.uars,
        }
    }

    pub(crate) fn describe(&self) -> String {
        format!(
            "pd {} cq {} qp {} mr {} uar {}",
            self.pds, self.cqs, self.qps, self.mrs, self.uars
        )
    }
}

/// The counts of `rmlx5_<dev>` in the text of `rmlx5/objects`, each kind
/// by its name (`None`: no such line, or a kind missing).
fn function_objects_of(text: &str, dev: u32) -> Option<FnObjects> {
    let name = format!("rmlx5_{dev}");
    let line = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name.as_str()))?;
    let toks: Vec<&str> = line.split_whitespace().skip(1).collect();
    let get = |k: &str| -> Option<u64> {
        toks.chunks(2)
            .find(|c| c.first() == Some(&k))
            .and_then(|c| c.get(1))
            .and_then(|v| v.parse().ok())
    };
    Some(FnObjects {
        pds: get("pd")?,
        cqs: get("cq")?,
        qps: get("qp")?,
        mrs: get("mr")?,
        uars: get("uar")?,
    })
}

/// The counts of ConnectX function `rmlx5_<dev>` now.
pub(crate) fn function_objects(dev: u32) -> Result<FnObjects, String> {
    let path = "/sys/kernel/debug/rmlx5/objects";
    let t = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    function_objects_of(&t, dev).ok_or(format!("{path} has no line for rmlx5_{dev}: {t:?}"))
}

/// The CQ and QP tables of every HCA, for failure messages.
pub(crate) fn dump_tables(n: usize) -> String {
    let mut s = String::new();
    for dev in 0..n {
        for f in ["cqs", "qps"] {
            let t = debugfs(dev, f).unwrap_or_else(|e| e);
            for l in t.lines().skip(1) {
                s.push_str(&format!(" | rmlx5_{dev}/{f}: {l}"));
            }
        }
    }
    s
}

/// The EQs of an HCA that hold EQEs the driver has not consumed while no
/// interrupt is on its way (`model_pi != model_ci`, not armed), from
/// debugfs `eqs`: (eqn, the row).
fn stalled_eqs(text: &str) -> Vec<(u64, String)> {
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
    let col = |name: &str| header.iter().position(|h| *h == name);
    let (Some(eqn), Some(armed), Some(pi), Some(ci)) =
        (col("eqn"), col("armed"), col("model_pi"), col("model_ci"))
    else {
        return Vec::new();
    };
    lines
        .filter_map(|l| {
            let v: Vec<u64> = l
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            let get = |i: usize| v.get(i).copied();
            match (get(eqn), get(armed), get(pi), get(ci)) {
                (Some(n), Some(0), Some(p), Some(c)) if p != c => Some((n, l.to_string())),
                _ => None,
            }
        })
        .collect()
}

/// Checks that no EQ of any HCA stays stalled for `limit`: EQEs pending,
/// the EQ not armed, and its consumer index not moving (an interrupt was
/// lost and nothing will re-arm the EQ).
pub(crate) fn check_eqs(n: usize, limit: Duration) -> Res {
    let start = Instant::now();
    loop {
        let mut stuck = Vec::new();
        for dev in 0..n {
            for (eqn, row) in stalled_eqs(&debugfs(dev, "eqs")?) {
                stuck.push((dev, eqn, row));
            }
        }
        if stuck.is_empty() {
            return Ok(());
        }
        if start.elapsed() > limit {
            let rows: Vec<String> = stuck
                .iter()
                .map(|(d, e, r)| format!("rmlx5_{d} EQ {e}: {r}"))
                .collect();
            return Err(format!(
                "EQ stalled for {limit:?} with EQEs pending and not armed (eqn vector irq ci \
                 armed eqes irqs model_pi model_ci interrupts overruns): {}",
                rows.join("; ")
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits up to `limit` for the objects above `base` to go; returns the
/// last snapshot and whether it is back at the baseline.
pub(crate) fn wait_baseline(
    base: &Objects,
    n: usize,
    limit: Duration,
) -> Result<(Objects, bool), String> {
    let start = Instant::now();
    loop {
        let now = snapshot(n)?;
        if now.excess_over(base) == 0 {
            return Ok((now, true));
        }
        if start.elapsed() > limit {
            return Ok((now, false));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counted_devices_add_to_the_excess() {
        let t = "rmlx5_2 pd 1 cq 2 qp 3 mr 0 uar 1\nrmlx5_3 pd 0 cq 0 qp 0 mr 0 uar 0\n";
        assert_eq!(counted_objects(t), vec![(2, 7), (3, 0)]);
        let base = Objects {
            counted: vec![(2, 1)],
            ..Objects::default()
        };
        let now = Objects {
            counted: counted_objects(t),
            ..Objects::default()
        };
        assert_eq!(now.excess_over(&base), 6);
        assert_eq!(base.excess_over(&now), 0);
    }

    #[test]
    fn function_counts_by_kind() {
        let t = "rmlx5_2 pd 1 cq 2 qp 3 mr 4 uar 5\nrmlx5_3 pd 0 cq 0 qp 0 mr 0 uar 0\n";
        let o = function_objects_of(t, 2).unwrap();
        assert_eq!(
            o,
            FnObjects {
                pds: 1,
                cqs: 2,
                qps: 3,
                mrs: 4,
                uars: 5
            }
        );
        assert_eq!(o.describe(), "pd 1 cq 2 qp 3 mr 4 uar 5");
        assert_eq!(function_objects_of(t, 3), Some(FnObjects::default()));
        assert_eq!(o.plus(&o).uars, 10);
        // No line for the device, a prefix of another's name, a kind missing.
        assert_eq!(function_objects_of(t, 0), None);
        assert_eq!(
            function_objects_of("rmlx5_22 pd 1 cq 1 qp 1 mr 1 uar 1", 2),
            None
        );
        assert_eq!(function_objects_of("rmlx5_2 pd 1 cq 1 qp 1 mr 1", 2), None);
    }

    #[test]
    fn debugfs_parsing() {
        let cqs = "cqn pi ci armed solicited sn error events handler\n1 0 0 0 0 0 0 0 1\n2 3 3 1 0 1 0 1 1\n";
        assert_eq!(table_rows(cqs), 2);
        assert_eq!(
            table_rows("qpn state dest_hca dest_qpn sq_pi sq_ci rq_ci\n"),
            0
        );
        assert_eq!(table_rows(""), 0);
        let stats = "stray_eqes 1\nulp_objects 0\ndma_regions buf 8 kernel_mr 1 user_mr 3\nmodel Stats { doorbells: 4 }\n";
        assert_eq!(dma_field(stats, "buf"), Some(8));
        assert_eq!(dma_field(stats, "kernel_mr"), Some(1));
        assert_eq!(dma_field(stats, "user_mr"), Some(3));
        assert_eq!(dma_field(stats, "nope"), None);
        assert_eq!(dma_field("nothing", "buf"), None);
        let base = Objects {
            cqs: vec![1, 0],
            qps: vec![0, 0],
            dma_buf: 8,
            user_mr: 0,
            counted: Vec::new(),
        };
        let now = Objects {
            cqs: vec![3, 0],
            qps: vec![0, 2],
            dma_buf: 7,
            user_mr: 1,
            counted: Vec::new(),
        };
        assert_eq!(now.excess_over(&base), 5);
        assert_eq!(base.excess_over(&base), 0);
    }

    #[test]
    fn stalled_eq_rows() {
        let t = "eqn vector irq ci armed eqes irqs model_pi model_ci interrupts overruns\n\
                 0 0 24 18 1 18 17 18 18 17 0\n\
                 1 1 25 118 0 118 102 143 118 103 0\n\
                 2 2 26 19 0 19 16 19 19 16 0\n";
        let s = stalled_eqs(t);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].0, 1);
        assert!(stalled_eqs("").is_empty());
        assert!(stalled_eqs("eqn armed\n1 0\n").is_empty());
    }
}
