//! One watch as the event loop sees it. kube-runtime's watcher lists,
//! watches, follows bookmarks and relists after a 410 Gone; every (re)list
//! arrives as `Init`, `InitApply` … `InitDone`. [`Watch`] applies those
//! events to an index, the same way for every watch: what a relist does not
//! list again was deleted while the watch was down. After its first complete
//! list the watch is synced, which is what readiness is made of.
//!
//! The shape is kubert's `IndexNamespacedResource`: an index says how to
//! apply an object, delete one, and which keys it holds; the protocol is here.
//! A relist remembers what it listed in a set of keys, or, for an index that
//! marks its own entries, in those marks.

use std::collections::HashSet;
use std::hash::Hash;

use kube::runtime::watcher::Event;

use crate::controller::model::message::Partition;

/// What one watch's objects do to an index.
pub trait WatchIndex<T> {
    type Key: Clone + Eq + Hash;

    /// The key of `item`, or `None` when the index does not hold such items
    /// (they are neither applied nor remembered by a relist).
    fn key(&self, item: &T) -> Option<Self::Key>;

    /// `item` was listed, created or changed.
    fn apply(&mut self, item: T);

    /// The object was deleted (or found deleted by a relist).
    fn delete(&mut self, key: Self::Key);

    /// The keys the index holds of this watch's objects that are not in
    /// `listed`: what a relist found deleted. Filtered here rather than
    /// copying every key held, which at a relist of a large cluster was a
    /// second copy of the index beside `listed`.
    fn unlisted(&self, listed: &HashSet<Self::Key>) -> Vec<Self::Key>;

    /// The namespace of a key, where the index's watches may list one namespace each
    /// (`--namespaces`): a relist of one namespace finds deleted only what is in it.
    fn namespace_of(_key: &Self::Key) -> Option<&str> {
        None
    }

    /// A relist begins. An index that marks listed entries itself clears the marks of what
    /// it holds of this watch's objects `within` one namespace (`None`: all) and says `true`:
    /// the relist then keeps no set of keys, and [`Self::unlisted`] is handed an empty one.
    /// A set of cloned keys cost 100–130 B per tracked object at a large cluster's relist.
    fn begin_marking(&mut self, _within: Option<&str>) -> bool {
        false
    }

    /// The relist under way listed `key` (called only after `begin_marking` said `true`).
    fn mark_listed(&mut self, _key: &Self::Key) {}
}

/// What a (re)list under way has listed so far.
#[derive(Debug)]
enum Listing<K> {
    Keys(HashSet<K>),
    /// On the index's own entries.
    Marked,
}

/// The relist bookkeeping of one watch, and whether it has listed once.
#[derive(Debug)]
pub struct Watch<K> {
    /// What the (re)list under way listed so far, if one is.
    listing: Option<Listing<K>>,
    synced: bool,
    /// The one namespace this watch lists (`None`: every namespace).
    within: Partition,
}

impl<K> Default for Watch<K> {
    fn default() -> Self {
        Watch { listing: None, synced: false, within: None }
    }
}

impl<K: Clone + Eq + Hash> Watch<K> {
    /// A watch of one namespace's objects (`Some`), or of every namespace's.
    pub fn within(within: Partition) -> Self {
        Watch { within, ..Watch::default() }
    }

    /// Applies one watcher event to `index`.
    pub fn handle<T, I: WatchIndex<T, Key = K>>(&mut self, index: &mut I, event: Event<T>) {
        match event {
            Event::Init => {
                self.listing = Some(match index.begin_marking(self.within.as_deref()) {
                    true => Listing::Marked,
                    false => Listing::Keys(HashSet::new()),
                });
            }
            Event::InitApply(item) => {
                match (&mut self.listing, index.key(&item)) {
                    (Some(Listing::Keys(listed)), Some(key)) => {
                        listed.insert(key);
                    }
                    (Some(Listing::Marked), Some(key)) => index.mark_listed(&key),
                    _ => {}
                }
                index.apply(item);
            }
            Event::Apply(item) => index.apply(item),
            Event::Delete(item) => {
                if let Some(key) = index.key(&item) {
                    index.delete(key);
                }
            }
            Event::InitDone => {
                // An end without a beginning lists nothing and so removes nothing.
                if let Some(listing) = self.listing.take() {
                    let listed = match listing {
                        Listing::Keys(listed) => listed,
                        Listing::Marked => HashSet::new(),
                    };
                    let within = self.within.as_deref();
                    let in_partition = |key: &K| {
                        within.is_none_or(|ns| I::namespace_of(key).is_none_or(|of| of == ns))
                    };
                    for key in index.unlisted(&listed).into_iter().filter(in_partition) {
                        index.delete(key);
                    }
                }
                self.synced = true;
            }
        }
    }

    /// Whether the watch has listed everything once.
    pub fn synced(&self) -> bool {
        self.synced
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names, and every call made.
    #[derive(Default)]
    struct Names {
        held: Vec<&'static str>,
        deleted: Vec<&'static str>,
    }

    impl WatchIndex<&'static str> for Names {
        type Key = &'static str;
        fn key(&self, item: &&'static str) -> Option<&'static str> {
            (!item.starts_with('-')).then_some(*item)
        }
        fn apply(&mut self, item: &'static str) {
            if !self.held.contains(&item) && self.key(&item).is_some() {
                self.held.push(item);
            }
        }
        fn delete(&mut self, key: &'static str) {
            self.held.retain(|k| *k != key);
            self.deleted.push(key);
        }
        fn unlisted(&self, listed: &HashSet<&'static str>) -> Vec<&'static str> {
            self.held.iter().filter(|k| !listed.contains(*k)).copied().collect()
        }
    }

    /// Names that carry their own listed mark, and every call made.
    #[derive(Default)]
    struct Marked {
        held: Vec<(&'static str, bool)>,
        deleted: Vec<&'static str>,
        handed: Vec<usize>,
    }

    impl WatchIndex<&'static str> for Marked {
        type Key = &'static str;
        fn key(&self, item: &&'static str) -> Option<&'static str> {
            self.held.iter().any(|(k, _)| k == item).then_some(*item)
        }
        fn apply(&mut self, _item: &'static str) {}
        fn delete(&mut self, key: &'static str) {
            self.held.retain(|(k, _)| *k != key);
            self.deleted.push(key);
        }
        fn unlisted(&self, listed: &HashSet<&'static str>) -> Vec<&'static str> {
            assert!(listed.is_empty(), "a marking index is handed no keys");
            self.held.iter().filter(|(_, marked)| !marked).map(|(k, _)| *k).collect()
        }
        fn begin_marking(&mut self, _within: Option<&str>) -> bool {
            self.handed.push(self.held.len());
            self.held.iter_mut().for_each(|(_, marked)| *marked = false);
            true
        }
        fn mark_listed(&mut self, key: &&'static str) {
            self.held.iter_mut().filter(|(k, _)| k == key).for_each(|(_, marked)| *marked = true);
        }
    }

    #[test]
    fn an_index_that_marks_its_entries_loses_what_a_relist_left_unmarked() {
        let mut watch = Watch::default();
        let mut names =
            Marked { held: vec![("a", true), ("b", true), ("c", true)], ..Marked::default() };
        for event in [Event::Init, Event::InitApply("a"), Event::InitApply("c"), Event::InitDone] {
            watch.handle(&mut names, event);
        }
        assert_eq!(names.deleted, ["b"]);
        assert_eq!(names.handed, [3], "its marks cleared once, at the relist's start");
        // A relist that starts again from the beginning clears the marks again.
        for event in [Event::Init, Event::InitApply("a"), Event::Init, Event::InitApply("c")] {
            watch.handle(&mut names, event);
        }
        watch.handle(&mut names, Event::InitDone);
        assert_eq!(names.deleted, ["b", "a"]);
        assert!(watch.synced());
    }

    #[test]
    fn what_a_relist_does_not_list_again_is_deleted() {
        let (mut watch, mut names) = (Watch::default(), Names::default());
        assert!(!watch.synced());
        for event in [Event::Init, Event::InitApply("a"), Event::InitApply("b"), Event::InitDone] {
            watch.handle(&mut names, event);
        }
        assert!(watch.synced());
        watch.handle(&mut names, Event::Apply("c"));
        assert_eq!(names.held, ["a", "b", "c"]);
        // The watch was down; b was deleted meanwhile, d created; "-x" is not held.
        for event in
            [Event::Init, Event::InitApply("a"), Event::InitApply("c"), Event::InitApply("d")]
        {
            watch.handle(&mut names, event);
        }
        watch.handle(&mut names, Event::InitApply("-x"));
        watch.handle(&mut names, Event::InitDone);
        assert_eq!(names.held, ["a", "c", "d"]);
        assert_eq!(names.deleted, ["b"]);
        // An end without a beginning removes nothing; a delete deletes.
        watch.handle(&mut names, Event::InitDone);
        watch.handle(&mut names, Event::Delete("a"));
        assert_eq!(names.held, ["c", "d"]);
    }
}
