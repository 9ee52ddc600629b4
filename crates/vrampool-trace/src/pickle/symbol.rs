//! The strings a PyTorch snapshot reader looks for: the keys it reads and the actions it knows. Every other
//! string decodes to [`Symbol::Other`], without its text.

/// A string of a snapshot pickle, as the reader needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Symbol {
    /// Key `action` of a trace entry.
    Action,
    /// Key `addr` of a trace entry.
    Addr,
    /// Key `size` of a trace entry.
    Size,
    /// Key `stream` of a trace entry.
    Stream,
    /// Key `time_us` of a trace entry.
    TimeUs,
    /// Key `device_traces` of the snapshot.
    DeviceTraces,
    /// Action `alloc`.
    Alloc,
    /// Action `free_requested`.
    FreeRequested,
    /// Action `free_completed`.
    FreeCompleted,
    /// Action `segment_alloc`.
    SegmentAlloc,
    /// Action `segment_free`.
    SegmentFree,
    /// Action `segment_map`.
    SegmentMap,
    /// Action `segment_unmap`.
    SegmentUnmap,
    /// Action `oom`.
    Oom,
    /// Action `snapshot`, `annotate` or `user_defined`: entries PyTorch writes that are no allocator event.
    NonEvent,
    /// Any other string.
    Other,
}

/// The dict keys the reader keeps; the values of all other keys are dropped as they are decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Field {
    Action = 0,
    Addr = 1,
    Size = 2,
    Stream = 3,
    TimeUs = 4,
    DeviceTraces = 5,
}

impl Field {
    /// The key's text, for messages.
    pub(crate) const fn key(self) -> &'static str {
        match self {
            Field::Action => "action",
            Field::Addr => "addr",
            Field::Size => "size",
            Field::Stream => "stream",
            Field::TimeUs => "time_us",
            Field::DeviceTraces => "device_traces",
        }
    }
}

impl Symbol {
    /// The symbol of the UTF-8 (or ASCII) text `text`.
    #[inline]
    pub(crate) fn of(text: &[u8]) -> Symbol {
        match text {
            b"action" => Symbol::Action,
            b"addr" => Symbol::Addr,
            b"size" => Symbol::Size,
            b"stream" => Symbol::Stream,
            b"time_us" => Symbol::TimeUs,
            b"device_traces" => Symbol::DeviceTraces,
            b"alloc" => Symbol::Alloc,
            b"free_requested" => Symbol::FreeRequested,
            b"free_completed" => Symbol::FreeCompleted,
            b"segment_alloc" => Symbol::SegmentAlloc,
            b"segment_free" => Symbol::SegmentFree,
            b"segment_map" => Symbol::SegmentMap,
            b"segment_unmap" => Symbol::SegmentUnmap,
            b"oom" => Symbol::Oom,
            b"snapshot" | b"annotate" | b"user_defined" => Symbol::NonEvent,
            _ => Symbol::Other,
        }
    }

    /// The field this symbol names when it is a dict key the reader keeps.
    #[inline]
    pub(crate) const fn field(self) -> Option<Field> {
        match self {
            Symbol::Action => Some(Field::Action),
            Symbol::Addr => Some(Field::Addr),
            Symbol::Size => Some(Field::Size),
            Symbol::Stream => Some(Field::Stream),
            Symbol::TimeUs => Some(Field::TimeUs),
            Symbol::DeviceTraces => Some(Field::DeviceTraces),
            _ => None,
        }
    }
}
