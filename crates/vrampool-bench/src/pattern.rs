//! The patterns, named as the reports name them.

use serde::{Deserialize, Serialize};

use vrampool::{KIB, MIB};

/// A latency pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Pattern {
    /// Allocate and free `size` bytes, repeated.
    Pair(u64),
    /// 1000 live blocks, log-uniform 256 B to 8 MiB, free one at random and allocate one.
    Churn,
}

impl Pattern {
    /// The patterns `vrampool bench` reports: pairs at 4 KiB and 1 MiB, and churn.
    pub const REPORTED: [Pattern; 3] = [Pattern::Pair(4 * KIB), Pattern::Pair(MIB), Pattern::Churn];

    /// The pattern's name in reports: `pair-4k`, `pair-1m`, `churn`.
    pub fn name(self) -> String {
        match self {
            Pattern::Pair(size) if size % MIB == 0 => format!("pair-{}m", size / MIB),
            Pattern::Pair(size) if size % KIB == 0 => format!("pair-{}k", size / KIB),
            Pattern::Pair(size) => format!("pair-{size}"),
            Pattern::Churn => "churn".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let names: Vec<String> = Pattern::REPORTED.iter().map(|p| p.name()).collect();
        assert_eq!(names, ["pair-4k", "pair-1m", "churn"]);
    }
}
