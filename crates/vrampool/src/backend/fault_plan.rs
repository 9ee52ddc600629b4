//! Fault injection for the backends that need no GPU: make a chosen device call fail.

/// Which device calls of a [`crate::SimDevice`] or [`crate::HostMemory`] fail on purpose.
///
/// Calls are numbered from 1, counting every call (memory and event calls alike) made after the plan was
/// set. A failed call changes nothing on the device and returns [`crate::Error::InjectedFault`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultPlan {
    /// Fail the call with this number, once.
    pub fail_call: Option<u64>,
    /// Fail every call from the one with this number on (a device that stays broken).
    pub fail_from_call: Option<u64>,
    /// Fail every call that would take more than this many bytes of device memory.
    pub fail_above_bytes: Option<u64>,
}

impl FaultPlan {
    /// A plan that fails no call.
    pub fn none() -> Self {
        Self::default()
    }

    /// Fail the `n`-th call from now (1-based), once.
    pub fn fail_call(n: u64) -> Self {
        FaultPlan { fail_call: Some(n), ..Self::default() }
    }

    /// Fail every call from the `n`-th on (1-based).
    pub fn fail_from_call(n: u64) -> Self {
        FaultPlan { fail_from_call: Some(n), ..Self::default() }
    }

    /// Fail every call that would take more than `bytes` of device memory.
    pub fn fail_above(bytes: u64) -> Self {
        FaultPlan { fail_above_bytes: Some(bytes), ..Self::default() }
    }

    /// Whether call number `index` (1-based), taking `acquires` bytes of device memory, fails.
    pub(crate) fn fails(&self, index: u64, acquires: u64) -> bool {
        self.fail_call == Some(index)
            || self.fail_from_call.is_some_and(|from| index >= from)
            || self.fail_above_bytes.is_some_and(|limit| acquires > limit)
    }
}
