//! The pools made through the C API, by handle.
//!
//! A `vrampool_pool*` is an opaque number, never dereferenced: each function looks it up here, so a
//! NULL, made-up or destroyed handle is an error code rather than a crash, and a pool destroyed while
//! another thread uses it lives until that call returns. Numbers are never reused.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};

use parking_lot::RwLock;

use crate::backed_pool::BackedPool;

/// The pools made through the C API and not yet destroyed.
pub(crate) struct HandleTable {
    next: AtomicUsize,
    pools: RwLock<HashMap<usize, Arc<BackedPool>>>,
}

/// The process's table.
pub(crate) static HANDLES: LazyLock<HandleTable> = LazyLock::new(HandleTable::default);

impl Default for HandleTable {
    fn default() -> Self {
        HandleTable { next: AtomicUsize::new(1), pools: RwLock::default() }
    }
}

impl HandleTable {
    /// Keeps `pool`; returns its handle (never 0).
    pub(crate) fn insert(&self, pool: BackedPool) -> usize {
        let handle = self.next.fetch_add(1, Ordering::Relaxed);
        self.pools.write().insert(handle, Arc::new(pool));
        handle
    }

    /// The pool with this handle, if it is live.
    pub(crate) fn get(&self, handle: usize) -> Option<Arc<BackedPool>> {
        self.pools.read().get(&handle).cloned()
    }

    /// Forgets the pool with this handle; returns it if it was live.
    pub(crate) fn remove(&self, handle: usize) -> Option<Arc<BackedPool>> {
        self.pools.write().remove(&handle)
    }

    /// Pools live now.
    pub(crate) fn len(&self) -> usize {
        self.pools.read().len()
    }
}

#[cfg(test)]
mod tests {
    use vrampool::{BackendKind, Pool, PoolSpec};

    use super::*;

    #[test]
    fn handles_are_unique_and_die_once() {
        let table = HandleTable::default();
        let make = || BackedPool::build(&PoolSpec::parse("strategy=fixed,block_count=4").unwrap(), BackendKind::Sim, 0);
        let a = table.insert(make().unwrap());
        let b = table.insert(make().unwrap());
        assert!(a != 0 && b != 0 && a != b);
        assert_eq!(table.len(), 2);
        let held = table.get(a).unwrap();
        assert!(table.remove(a).is_some());
        assert!(table.remove(a).is_none() && table.get(a).is_none());
        assert_eq!(held.pool().strategy(), "fixed", "a pool in use outlives its handle");
        let c = table.insert(make().unwrap());
        assert!(c != a && c != b, "numbers are never reused");
    }
}
