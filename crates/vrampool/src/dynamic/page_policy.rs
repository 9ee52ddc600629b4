//! How large the physical pages are that a virtual range maps as it grows, where the pool chooses them.

use serde::{Deserialize, Serialize};

use crate::units::GIB;

/// Pages sized from the memory the pool holds: each new page is the largest power-of-two multiple of the
/// device's granularity that holds at most 1/[`PagePolicy::pages_per_pool`] of the bytes the pool holds,
/// and at most [`PagePolicy::largest`].
///
/// A small pool maps the device's finest pages, so that rounding to pages and idle stretches of them cost
/// little; a large one maps larger pages, so that the driver calls that map it stay about as few as those
/// of a small one (one physical allocation per page, and a move, an unmap or an alias per page). The
/// memory a page adds beyond a block's need is at most the share of the pool one page holds, and it is
/// used by the blocks placed next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PagePolicy {
    /// A new page holds at most the pool's bytes divided by this, at least 1. Default: 256 (a page is at
    /// most 0.4% of the pool): fewer, larger pages spend less time in the driver, and leave more memory idle
    /// in pages that blocks still touch (docs/BENCHMARKS.md).
    pub pages_per_pool: u64,
    /// The largest page in bytes. Default: 1 GiB.
    pub largest: u64,
    /// The share of the time, in thousandths, that moving and aliasing idle pages may take on a device whose
    /// calls are timed ([`crate::Backend::driver_clock`]): the time since the pool first read the clock. The
    /// moves are counted at the cost model's price of each call, on a real device as on a simulated one.
    /// Past it, a block that lacks pages gets new ones instead, [`PagePolicy::thrifty_doublings`] times
    /// larger, until the moves are within their share again; only a block that lacks a large share of the
    /// pool's memory still moves idle pages, within a bounded overdraft ([`PagePolicy::LARGE_NEED_PER_POOL`],
    /// [`PagePolicy::OVERDRAFT_SHARES`]). 1000 or more: no bound. Default: 10 (1%, the driver time the
    /// pool is meant to stay within).
    #[serde(default = "default_driver_per_mille")]
    pub driver_per_mille: u64,
    /// How many times new pages are doubled (up to [`PagePolicy::largest`]) while moves are over their share
    /// of the time, so that the blocks that come next find memory mapped. Default: 2 (pages 4 times larger).
    #[serde(default = "default_thrifty_doublings")]
    pub thrifty_doublings: u32,
}

fn default_driver_per_mille() -> u64 {
    PagePolicy::default().driver_per_mille
}

fn default_thrifty_doublings() -> u32 {
    PagePolicy::default().thrifty_doublings
}

impl Default for PagePolicy {
    fn default() -> Self {
        PagePolicy { pages_per_pool: 256, largest: GIB, driver_per_mille: 10, thrifty_doublings: 2 }
    }
}

impl PagePolicy {
    /// A block that lacks at least the pool's mapped memory divided by this is a large need: it may move
    /// idle pages past the share of [`PagePolicy::driver_per_mille`], up to [`PagePolicy::OVERDRAFT_SHARES`]
    /// times it. A growth is for good, and one this large raises the pool's peak by as much; moving the pages
    /// costs driver time once.
    pub const LARGE_NEED_PER_POOL: u64 = 32;

    /// How many times its share of the time the moves may take for a large need
    /// ([`PagePolicy::LARGE_NEED_PER_POOL`]): the bound on the overdraft, so that a stream of large needs
    /// back to back still spends a bounded share of its time in the driver (docs/BENCHMARKS.md).
    pub const OVERDRAFT_SHARES: u64 = 3;

    /// log2 of the granularity-sized chunks of a new page, with `reserved` bytes held, on a device of
    /// `granularity` bytes: 0 (the granularity) for a pool smaller than [`PagePolicy::pages_per_pool`] pages
    /// of the granularity.
    pub fn order(&self, reserved: u64, granularity: u64) -> u32 {
        let share = reserved / self.pages_per_pool.max(1);
        let largest = self.largest.max(granularity);
        let chunks = (share.min(largest) / granularity.max(1)).max(1);
        chunks.ilog2()
    }

    /// log2 of the chunks of a new page while moves are over their share of the time: [`PagePolicy::order`]
    /// with [`PagePolicy::thrifty_doublings`] more doublings, never past [`PagePolicy::largest`].
    pub fn thrifty_order(&self, reserved: u64, granularity: u64) -> u32 {
        let most = (self.largest.max(granularity) / granularity.max(1)).max(1).ilog2();
        self.order(reserved, granularity).saturating_add(self.thrifty_doublings).min(most)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::MIB;

    #[test]
    fn pages_grow_with_the_pool_by_powers_of_two_up_to_the_largest() {
        let p = PagePolicy::default();
        let g = 2 * MIB;
        assert_eq!(p.order(0, g), 0);
        assert_eq!(p.order(511 * MIB, g), 0, "under 256 pages of 2 MiB");
        assert_eq!(p.order(1024 * MIB, g), 1, "4 MiB pages from 1 GiB");
        assert_eq!(p.order(5 * GIB, g), 3, "20 MiB a page: 16 MiB");
        assert_eq!(p.order(40 * GIB, g), 6, "160 MiB a page: 128 MiB");
        assert_eq!(p.order(1 << 50, g), 9, "1 GiB at most");
        let tiny = PagePolicy { pages_per_pool: 0, largest: 0, ..PagePolicy::default() };
        assert_eq!(tiny.order(1 << 40, g), 0, "a largest page under the granularity is the granularity");
        assert_eq!(tiny.thrifty_order(1 << 40, g), 0);
        assert_eq!(p.thrifty_order(0, g), 2, "4 chunks a page while over budget");
        assert_eq!(p.thrifty_order(5 * GIB, g), 5);
        assert_eq!(p.thrifty_order(1 << 50, g), 9, "never past the largest");
    }
}
