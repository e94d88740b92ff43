//! Relists, the same for every watch: between a watcher's `Init` and
//! `InitDone` every object that still exists is listed again. What was known
//! before and is not listed again was deleted while the watch was down.

use std::collections::HashSet;
use std::hash::Hash;

#[derive(Debug)]
pub struct Relist<K> {
    listed: Option<HashSet<K>>,
}

impl<K> Default for Relist<K> {
    fn default() -> Self {
        Relist { listed: None }
    }
}

impl<K: Eq + Hash + Clone> Relist<K> {
    /// A (re)list begins.
    pub fn begin(&mut self) {
        self.listed = Some(HashSet::new());
    }

    /// An object arrived in the list.
    pub fn listed(&mut self, key: K) {
        if let Some(listed) = &mut self.listed {
            listed.insert(key);
        }
    }

    /// The list is complete: returns the `known` keys it did not contain.
    pub fn end<'a>(&mut self, known: impl Iterator<Item = &'a K>) -> Vec<K>
    where
        K: 'a,
    {
        // An end without a beginning lists nothing and so removes nothing.
        let Some(listed) = self.listed.take() else { return Vec::new() };
        known.filter(|k| !listed.contains(*k)).cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_relist_does_not_list_again_is_gone() {
        let mut relist = Relist::default();
        let known = ["a", "b", "c"];
        relist.begin();
        relist.listed("a");
        relist.listed("c");
        relist.listed("new");
        assert_eq!(relist.end(known.iter()), vec!["b"]);
        // An end without a beginning removes nothing.
        assert!(relist.end(known.iter()).is_empty());
    }
}
