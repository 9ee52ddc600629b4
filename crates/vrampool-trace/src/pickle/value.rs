//! The values the snapshot decoder keeps: scalars in full, strings as [`Symbol`]s, lists and dicts as
//! handles into [`Objects`](super::objects::Objects), and everything else as an opaque marker.

use super::symbol::Symbol;

/// A decoded pickle value. Small and `Copy`: the memo and the stack hold these.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Value {
    /// Python's `None`.
    None,
    /// A bool.
    Bool(bool),
    /// An int that fits an `i64`.
    Int(i64),
    /// An int from 2^63 to 2^64 - 1.
    BigUint(u64),
    /// A float.
    Float(f64),
    /// A string (its symbol; the text of unknown strings is not kept).
    Str(Symbol),
    /// A list, by handle.
    List(u32),
    /// A dict, by handle.
    Dict(u32),
    /// A value the reader does not look into.
    Opaque(Opaque),
}

/// The kinds of value the reader does not look into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Opaque {
    /// An int beyond 64 bits.
    BigInt,
    /// bytes or bytearray.
    Bytes,
    /// A tuple.
    Tuple,
    /// A set or frozenset.
    Set,
    /// A list item that was not kept (a scalar, or a dict without any key the reader keeps, in a list that
    /// held nothing else before it).
    Unkept,
}

impl Value {
    /// What kind of value this is, for messages ("an integer", "a string", ...).
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Bool(_) => "a bool",
            Value::Int(_) | Value::BigUint(_) | Value::Opaque(Opaque::BigInt) => "an integer",
            Value::Float(_) => "a float",
            Value::Str(_) => "a string",
            Value::List(_) => "a list",
            Value::Dict(_) => "a dict",
            Value::Opaque(Opaque::Bytes) => "a bytes object",
            Value::Opaque(Opaque::Tuple) => "a tuple",
            Value::Opaque(Opaque::Set) => "a set",
            Value::Opaque(Opaque::Unkept) => "a value without trace-entry keys",
        }
    }
}
