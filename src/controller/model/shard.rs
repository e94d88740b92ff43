//! `--shard I/N`: which namespaces one controller owns when N controllers share a cluster,
//! the Lease each shard elects its leader with, and when a shard must wait because another
//! count of shards (an earlier or later N) still holds its Leases.
//!
//! Namespaces are owned by a stable hash of their name (FNV-1a, 64 bits, modulo N): the same
//! name lands in the same shard in every process, release and architecture, so a namespace's
//! workloads are only ever patched by one shard of a given N. The objects a workload tracks
//! need no partition of their own: the controller only keeps objects its own workloads track,
//! so a Secret another namespace shares by consent is followed by every shard with a tracker.

use std::fmt;

/// One shard of N; `0/1` is the whole cluster (no sharding).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    index: u32,
    count: u32,
}

/// More shards than this is a typo, not a cluster: each needs its own replicas.
pub const MAX_SHARDS: u32 = 256;

impl Default for Shard {
    fn default() -> Self {
        Shard { index: 0, count: 1 }
    }
}

impl Shard {
    /// `I/N` with `0 <= I < N <= 256`.
    pub fn parse(text: &str) -> Result<Shard, String> {
        let usage = || {
            format!(
                "{text:?}: expected I/N, a shard index below a count of 1 to {MAX_SHARDS}, such as 0/3"
            )
        };
        let (index, count) = text.split_once('/').ok_or_else(usage)?;
        let index: u32 = index.trim().parse().map_err(|_| usage())?;
        let count: u32 = count.trim().parse().map_err(|_| usage())?;
        if count == 0 || count > MAX_SHARDS || index >= count {
            return Err(usage());
        }
        Ok(Shard { index, count })
    }

    pub fn count(&self) -> u32 {
        self.count
    }

    /// More than one shard: Leases, metrics and Events carry the shard.
    pub fn is_sharded(&self) -> bool {
        self.count > 1
    }

    /// Whether this shard rolls the workloads of `namespace`.
    pub fn owns(&self, namespace: &str) -> bool {
        self.count == 1 || shard_of(namespace, self.count) == self.index
    }

    /// The Lease this shard elects its leader with: `base` itself for a single controller (so
    /// an unsharded install keeps its Lease), else `<base>-<I>-of-<N>`. The count is part of
    /// the name so that shards of two counts, side by side during a change of N, never
    /// contend for one Lease.
    pub fn lease_name(&self, base: &str) -> String {
        if self.is_sharded() { format!("{base}-{}", self.label_value()) } else { base.to_owned() }
    }

    /// `<I>-of-<N>`: the shard as a label value may spell it (no `/`).
    pub fn label_value(&self) -> String {
        format!("{}-of-{}", self.index, self.count)
    }

    /// The count of shards a Lease named `name` belongs to, if it is one of `base`'s.
    pub fn count_of_lease(base: &str, name: &str) -> Option<u32> {
        if name == base {
            return Some(1);
        }
        let rest = name.strip_prefix(base)?.strip_prefix('-')?;
        let (index, count) = rest.split_once("-of-")?;
        let shard = Shard::parse(&format!("{index}/{count}")).ok()?;
        // Only the spelling `lease_name` writes: no leading zeros, no signs.
        (shard.lease_name(base) == name).then_some(shard.count)
    }

    /// Whether this shard must not lead while these Leases of `base` are held: any live
    /// Lease of another count means a previous (or next) set of shards is still working,
    /// and its namespaces overlap this shard's. `leases` are (name, held and not expired).
    pub fn waits_for<'a>(
        &self,
        base: &str,
        leases: impl IntoIterator<Item = (&'a str, bool)>,
    ) -> Option<&'a str> {
        leases.into_iter().find_map(|(name, live)| {
            let other = Shard::count_of_lease(base, name)?;
            (live && other != self.count).then_some(name)
        })
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// The shard of N that owns `namespace`: its FNV-1a hash modulo `count`.
pub fn shard_of(namespace: &str, count: u32) -> u32 {
    (namespace_hash(namespace) % u64::from(count.max(1))) as u32
}

/// FNV-1a, 64 bits: stable across processes and releases (std's hasher is neither), and
/// spread evenly enough over the short, similar names namespaces have (see the test).
fn namespace_hash(namespace: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in namespace.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_i_of_n_and_refuses_the_rest() {
        assert_eq!(Shard::parse("0/1"), Ok(Shard::default()));
        assert_eq!(Shard::parse("2/3").map(|s| s.to_string()), Ok("2/3".to_owned()));
        for bad in ["", "3", "3/3", "0/0", "-1/3", "1/257", "a/3", "1/3/4", "1 of 3"] {
            assert!(Shard::parse(bad).is_err(), "{bad}");
        }
        assert!(Shard::parse("1/3").is_ok_and(|s| s.is_sharded()));
        assert!(!Shard::default().is_sharded());
    }

    /// Pinned to FNV-1a's published vectors: a change to the hash would hand namespaces to
    /// other shards on upgrade, with two shards of one count each believing it owns one.
    #[test]
    fn the_hash_is_fnv1a_and_stable() {
        assert_eq!(namespace_hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(namespace_hash("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(namespace_hash("foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(shard_of("foobar", 3), (0x8594_4171_f739_67e8_u64 % 3) as u32);
    }

    #[test]
    fn every_namespace_has_exactly_one_owner_and_the_owners_are_spread() {
        for count in [1, 2, 3, 7] {
            let mut per_shard = vec![0_usize; count as usize];
            for n in 0..3_000 {
                let namespace = format!("team-{n}");
                let owners: Vec<u32> =
                    (0..count).filter(|&index| Shard { index, count }.owns(&namespace)).collect();
                assert_eq!(owners.len(), 1, "{namespace} of {count}");
                per_shard[owners[0] as usize] += 1;
            }
            let fair = 3_000 / count as usize;
            for owned in per_shard {
                assert!(owned.abs_diff(fair) * 10 < fair, "{count} shards: {owned} of ~{fair}");
            }
        }
    }

    #[test]
    fn lease_names_carry_the_count_and_are_read_back_only_as_written() {
        let base = "configsum-controller";
        assert_eq!(Shard::default().lease_name(base), base);
        let shard = Shard { index: 1, count: 3 };
        assert_eq!(shard.lease_name(base), "configsum-controller-1-of-3");
        assert_eq!(Shard::count_of_lease(base, base), Some(1));
        assert_eq!(Shard::count_of_lease(base, "configsum-controller-1-of-3"), Some(3));
        for other in [
            "configsum-controller-01-of-3",
            "configsum-controller-3-of-3",
            "configsum-controller-x",
            "configsum-controllers",
            "other-1-of-3",
        ] {
            assert_eq!(Shard::count_of_lease(base, other), None, "{other}");
        }
    }

    #[test]
    fn a_shard_waits_only_for_live_leases_of_another_count() {
        let base = "c";
        let three = Shard { index: 0, count: 3 };
        let held = [("c-0-of-3", true), ("c-1-of-3", true), ("c-0-of-2", false), ("x", true)];
        assert_eq!(three.waits_for(base, held), None);
        let with_old = [("c-1-of-3", true), ("c-1-of-2", true)];
        assert_eq!(three.waits_for(base, with_old), Some("c-1-of-2"));
        assert_eq!(three.waits_for(base, [("c", true)]), Some("c"));
        assert_eq!(Shard::default().waits_for(base, [("c-2-of-3", true)]), Some("c-2-of-3"));
        assert_eq!(Shard::default().waits_for(base, [("c", true)]), None);
    }
}
