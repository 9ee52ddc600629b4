//! Decoding pickles as PyTorch writes its memory snapshots: data only, streaming, keeping only what a trace
//! reader needs.

mod decoder;
mod memo;
mod objects;
mod opcode;
mod symbol;
mod value;

pub(crate) use decoder::{Decoded, decode};
pub(crate) use objects::Objects;
pub(crate) use opcode::{HIGHEST_PROTOCOL, PROTO, STOP, is_opcode};
pub(crate) use symbol::{Field, Symbol};
pub(crate) use value::Value;
