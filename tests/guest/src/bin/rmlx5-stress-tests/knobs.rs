// SPDX-License-Identifier: GPL-2.0

//! `RMLX5_STRESS`, the scale knobs every scenario reads, and the seeded
//! random numbers (`Gen`) the scenarios draw from.

use std::collections::BTreeMap;

// ---------------------------------------------------------------------------
// RMLX5_STRESS

/// Keys `RMLX5_STRESS` may carry for this program.
const KEYS: [&str; 12] = [
    "calls",
    "seed",
    "kills",
    "completions",
    "threads",
    "cqs",
    "scale",
    "inject",
    // The devices: no_lost_event's, kill_mid_traffic's pair, and the
    // ConnectX function fuzz_ioctl_sequences runs on instead of the
    // software HCAs.
    "dev",
    "dev0",
    "dev1",
    "fuzzdev",
];
/// Keys of other parts of `make stress` (Documentation/reliability.md),
/// accepted and ignored here so that one `RMLX5_STRESS` can serve all.
const OTHER_KEYS: [&str; 2] = ["failslab", "cve_loops"];
/// The count keys `scale` divides.
const COUNTS: [&str; 3] = ["calls", "kills", "completions"];

/// The parsed `RMLX5_STRESS` (only keys that were given).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Scale {
    values: BTreeMap<String, u64>,
}

/// A number in decimal or `0x` hex, `_` allowed between digits.
pub(crate) fn parse_number(v: &str) -> Option<u64> {
    let v = v.replace('_', "");
    match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => v.parse().ok(),
    }
}

impl Scale {
    fn parse(text: &str) -> Result<Scale, String> {
        let mut values = BTreeMap::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("RMLX5_STRESS: `{part}` is not key=value"))?;
            let (k, v) = (k.trim(), v.trim());
            if !KEYS.contains(&k) && !OTHER_KEYS.contains(&k) {
                return Err(format!(
                    "RMLX5_STRESS: unknown key `{k}` (known: {})",
                    KEYS.join(", ")
                ));
            }
            let n = parse_number(v)
                .ok_or_else(|| format!("RMLX5_STRESS: `{k}={v}` is not a number"))?;
            if values.insert(k.to_string(), n).is_some() {
                return Err(format!("RMLX5_STRESS: `{k}` given twice"));
            }
        }
        Ok(Scale { values })
    }

    /// `key`, or `default`; a count (`calls`, `kills`, `completions`) is
    /// divided by `scale` (at least 1 is left).
    pub(crate) fn get(&self, key: &str, default: u64) -> u64 {
        let v = self.values.get(key).copied().unwrap_or(default);
        match self.values.get("scale") {
            Some(d) if *d > 1 && COUNTS.contains(&key) => (v / d).max(1),
            _ => v,
        }
    }

    /// `key` within `lo..=hi`, or an error naming it.
    pub(crate) fn get_in(&self, key: &str, default: u64, lo: u64, hi: u64) -> Result<u64, String> {
        let v = self.get(key, default);
        if (lo..=hi).contains(&v) {
            Ok(v)
        } else {
            Err(format!("RMLX5_STRESS: {key}={v} is outside {lo}..={hi}"))
        }
    }

    /// `key` if it was given (not scaled).
    pub(crate) fn given(&self, key: &str) -> Option<u64> {
        self.values.get(key).copied()
    }

    /// The given seed, or a random one.
    pub(crate) fn seed(&self) -> u64 {
        self.values.get("seed").copied().unwrap_or_else(random_seed)
    }
}

/// `RMLX5_STRESS` from the environment.
pub(crate) fn scale() -> Result<Scale, String> {
    match std::env::var("RMLX5_STRESS") {
        Ok(s) => Scale::parse(&s),
        Err(std::env::VarError::NotPresent) => Ok(Scale::default()),
        Err(e) => Err(format!("RMLX5_STRESS: {e}")),
    }
}

fn random_seed() -> u64 {
    use std::io::Read;
    let mut b = [0u8; 8];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        if f.read_exact(&mut b).is_ok() {
            return u64::from_ne_bytes(b);
        }
    }
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    t ^ u64::from(std::process::id()).rotate_left(32)
}

// ---------------------------------------------------------------------------
// Random numbers (xorshift64*, seeded through splitmix64: never stuck at 0)

pub(crate) struct Gen {
    s: u64,
}

impl Gen {
    pub(crate) fn new(seed: u64) -> Gen {
        let mut z = seed ^ 0x9e37_79b9_7f4a_7c15;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        Gen {
            s: if z == 0 { 1 } else { z },
        }
    }

    pub(crate) fn u64(&mut self) -> u64 {
        self.s ^= self.s >> 12;
        self.s ^= self.s << 25;
        self.s ^= self.s >> 27;
        self.s.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub(crate) fn u32(&mut self) -> u32 {
        (self.u64() >> 32) as u32
    }

    /// Below `n` (0 for `n == 0`).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.u64() % n
        }
    }

    pub(crate) fn below32(&mut self, n: u32) -> u32 {
        self.below(u64::from(n)) as u32
    }

    pub(crate) fn index(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }

    pub(crate) fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }

    pub(crate) fn pick<T: Copy>(&mut self, xs: &[T]) -> Option<T> {
        if xs.is_empty() {
            None
        } else {
            xs.get(self.index(xs.len())).copied()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_parsing() {
        assert_eq!(Scale::parse("").unwrap(), Scale::default());
        let s = Scale::parse(" calls=100 , seed=0x10,kills=1_000,,").unwrap();
        assert_eq!(s.get("calls", 7), 100);
        assert_eq!(s.get("seed", 7), 16);
        assert_eq!(s.get("kills", 7), 1000);
        assert_eq!(s.get("threads", 7), 7);
        assert_eq!(s.seed(), 16);
        assert!(Scale::parse("calls").unwrap_err().contains("key=value"));
        assert!(Scale::parse("call=3").unwrap_err().contains("unknown key"));
        assert!(Scale::parse("calls=x")
            .unwrap_err()
            .contains("not a number"));
        assert!(Scale::parse("calls=-1").is_err());
        assert!(Scale::parse("calls=1,calls=2")
            .unwrap_err()
            .contains("twice"));
        let s = Scale::parse("scale=100,calls=1000000,failslab=1,cve_loops=3").unwrap();
        assert_eq!(s.get("calls", 7), 10_000);
        assert_eq!(s.get("kills", 5), 1);
        assert_eq!(s.get("completions", 200_000), 2000);
        assert_eq!(s.get("threads", 4), 4);
        // fuzzdev: given or not, never scaled.
        let s = Scale::parse("scale=10,fuzzdev=2,calls=100").unwrap();
        assert_eq!(s.given("fuzzdev"), Some(2));
        assert_eq!(s.get("calls", 7), 10);
        assert_eq!(Scale::parse("calls=1").unwrap().given("fuzzdev"), None);
        let s = Scale::parse("threads=0").unwrap();
        assert!(s.get_in("threads", 4, 1, 64).is_err());
        assert_eq!(s.get_in("cqs", 4, 1, 64), Ok(4));
        assert_eq!(parse_number("18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_number("0XfF"), Some(255));
        assert_eq!(parse_number(""), None);
    }

    #[test]
    fn generator_is_deterministic_and_never_stuck() {
        let (mut a, mut b) = (Gen::new(42), Gen::new(42));
        let xs: Vec<u64> = (0..100).map(|_| a.u64()).collect();
        let ys: Vec<u64> = (0..100).map(|_| b.u64()).collect();
        assert_eq!(xs, ys);
        let mut z = Gen::new(0);
        assert!((0..10).map(|_| z.u64()).any(|v| v != 0));
        assert_ne!(Gen::new(1).u64(), Gen::new(2).u64());
        let mut g = Gen::new(7);
        assert_eq!(g.below(0), 0);
        assert!((0..1000).all(|_| g.below(10) < 10));
        assert_eq!(g.pick::<u32>(&[]), None);
        assert_eq!(g.pick(&[5]), Some(5));
    }
}
