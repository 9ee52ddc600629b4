//! A data-only, streaming pickle decoder for PyTorch memory snapshots.
//!
//! Why it is written this way: a snapshot of a serving workload holds a million trace-entry dicts (the
//! gpt_serve trace: 980,456 entries, 50 MB of pickle), and a generic decoder that builds a value tree of
//! every dict, list and string spends most of its time building what a reader drops. This decoder runs
//! the pickle machine over compact `Copy` values instead: strings become symbols of the few
//! words a snapshot reader needs, each dict keeps only the keys of a trace entry (action, addr, size, stream,
//! time_us) and `device_traces` in a fixed record, and the values of all other keys are dropped as soon as
//! they are set. Nothing is allocated per string or per dict item, and a list of stack frames costs a
//! counter. `cargo run -p vrampool-trace --release --example decode_speed` times it (docs/BENCHMARKS.md).
//!
//! It decodes data only: the opcodes that import or call anything (GLOBAL, STACK_GLOBAL, REDUCE, INST, OBJ,
//! NEWOBJ, NEWOBJ_EX, BUILD, EXT1/2/4, PERSID, BINPERSID) are refused with an error naming the opcode and its
//! byte offset; nothing is ever imported or called. Out-of-band buffers (NEXT_BUFFER) are not supported.

use super::objects::Objects;
use super::opcode as op;
use super::symbol::Symbol;
use super::value::{Opaque, Value};
use crate::error::{Error, Result};

/// A decoded pickle: its value and the lists and dicts it refers to.
pub(crate) struct Decoded {
    /// The pickled value.
    pub(crate) root: Value,
    /// The lists and dicts, by handle.
    pub(crate) objects: Objects,
}

/// Decodes the pickle `data` of the trace named `name`.
pub(crate) fn decode(name: &str, data: &[u8]) -> Result<Decoded> {
    Machine {
        name,
        data,
        pos: 0,
        stack: Vec::with_capacity(64),
        marks: Vec::with_capacity(16),
        memo: Vec::new(),
        objects: Objects::for_pickle_of(data.len()),
    }
    .run()
}

/// The pickle machine: the stack, the marks into it, the memo, and the objects built.
struct Machine<'a> {
    name: &'a str,
    data: &'a [u8],
    /// Offset of the next byte to read.
    pos: usize,
    stack: Vec<Value>,
    /// Stack lengths at each MARK still open.
    marks: Vec<usize>,
    memo: Vec<Option<Value>>,
    objects: Objects,
}

impl<'a> Machine<'a> {
    fn run(mut self) -> Result<Decoded> {
        // A pickle has at most one memo entry per byte; reserve for the usual one per 25 bytes.
        self.memo.reserve(self.data.len() / 25);
        loop {
            let at = self.pos;
            let Some(&code) = self.data.get(at) else {
                return Err(self.truncated(at));
            };
            self.pos += 1;
            match code {
                op::BINGET => {
                    let index = self.byte(at)? as usize;
                    self.get(index, at)?;
                }
                op::LONG_BINGET => {
                    let index = u32::from_le_bytes(self.array(at)?) as usize;
                    self.get(index, at)?;
                }
                op::GET => {
                    let index = self.decimal_line(at)?;
                    self.get(index, at)?;
                }
                op::MEMOIZE => {
                    let value = self.top(at)?;
                    self.memo.push(Some(value));
                }
                op::BINPUT => {
                    let index = self.byte(at)? as usize;
                    self.put(index, at)?;
                }
                op::LONG_BINPUT => {
                    let index = u32::from_le_bytes(self.array(at)?) as usize;
                    self.put(index, at)?;
                }
                op::PUT => {
                    let index = self.decimal_line(at)?;
                    self.put(index, at)?;
                }
                op::BININT1 => {
                    let value = self.byte(at)?;
                    self.stack.push(Value::Int(i64::from(value)));
                }
                op::BININT2 => {
                    let value = u16::from_le_bytes(self.array(at)?);
                    self.stack.push(Value::Int(i64::from(value)));
                }
                op::BININT => {
                    let value = i32::from_le_bytes(self.array(at)?);
                    self.stack.push(Value::Int(i64::from(value)));
                }
                op::LONG1 => {
                    let len = self.byte(at)? as usize;
                    let bytes = self.take(len, at)?;
                    self.stack.push(long_value(bytes));
                }
                op::LONG4 => {
                    let len = i32::from_le_bytes(self.array(at)?);
                    let len = usize::try_from(len)
                        .map_err(|_| self.malformed(at, format!("LONG4 length {len} is negative")))?;
                    let bytes = self.take(len, at)?;
                    self.stack.push(long_value(bytes));
                }
                op::INT => {
                    let line = self.line(at)?;
                    let value = match line {
                        b"00" => Value::Bool(false),
                        b"01" => Value::Bool(true),
                        _ => self.decimal_value(line, at)?,
                    };
                    self.stack.push(value);
                }
                op::LONG => {
                    let line = self.line(at)?;
                    let digits = line.strip_suffix(b"L").unwrap_or(line);
                    let value = self.decimal_value(digits, at)?;
                    self.stack.push(value);
                }
                op::BINFLOAT => {
                    let value = f64::from_be_bytes(self.array(at)?);
                    self.stack.push(Value::Float(value));
                }
                op::FLOAT => {
                    let line = self.line(at)?;
                    let value = std::str::from_utf8(line).ok().and_then(|text| text.trim().parse::<f64>().ok());
                    let value = value.ok_or_else(|| self.malformed(at, "FLOAT argument is not a number"))?;
                    self.stack.push(Value::Float(value));
                }
                op::NONE => self.stack.push(Value::None),
                op::NEWTRUE => self.stack.push(Value::Bool(true)),
                op::NEWFALSE => self.stack.push(Value::Bool(false)),
                op::SHORT_BINUNICODE | op::SHORT_BINSTRING => {
                    let len = self.byte(at)? as usize;
                    let text = self.take(len, at)?;
                    self.stack.push(Value::Str(Symbol::of(text)));
                }
                op::BINUNICODE | op::BINSTRING => {
                    let len = u32::from_le_bytes(self.array(at)?) as usize;
                    let text = self.take(len, at)?;
                    self.stack.push(Value::Str(Symbol::of(text)));
                }
                op::BINUNICODE8 => {
                    let len = self.length8(at)?;
                    let text = self.take(len, at)?;
                    self.stack.push(Value::Str(Symbol::of(text)));
                }
                op::UNICODE => {
                    // raw-unicode-escape: the words a reader looks for have no escapes.
                    let line = self.line(at)?;
                    self.stack.push(Value::Str(text_symbol(line)));
                }
                op::STRING => {
                    let line = self.line(at)?;
                    let inner = match line {
                        [b'\'', inner @ .., b'\''] | [b'"', inner @ .., b'"'] => inner,
                        _ => return Err(self.malformed(at, "STRING argument is not quoted")),
                    };
                    self.stack.push(Value::Str(text_symbol(inner)));
                }
                op::SHORT_BINBYTES => {
                    let len = self.byte(at)? as usize;
                    self.take(len, at)?;
                    self.stack.push(Value::Opaque(Opaque::Bytes));
                }
                op::BINBYTES => {
                    let len = u32::from_le_bytes(self.array(at)?) as usize;
                    self.take(len, at)?;
                    self.stack.push(Value::Opaque(Opaque::Bytes));
                }
                op::BINBYTES8 | op::BYTEARRAY8 => {
                    let len = self.length8(at)?;
                    self.take(len, at)?;
                    self.stack.push(Value::Opaque(Opaque::Bytes));
                }
                op::EMPTY_DICT => {
                    let dict = self.objects.new_dict().ok_or_else(|| self.too_many(at))?;
                    self.stack.push(Value::Dict(dict));
                }
                op::EMPTY_LIST => {
                    let list = self.objects.new_list().ok_or_else(|| self.too_many(at))?;
                    self.stack.push(Value::List(list));
                }
                op::EMPTY_TUPLE => self.stack.push(Value::Opaque(Opaque::Tuple)),
                op::EMPTY_SET => self.stack.push(Value::Opaque(Opaque::Set)),
                op::MARK => self.marks.push(self.stack.len()),
                op::SETITEM => {
                    let value = self.pop(at)?;
                    let key = self.pop(at)?;
                    let dict = self.target_dict(self.stack.len(), at)?;
                    self.objects.set_item(dict, key, value);
                }
                op::SETITEMS => {
                    let mark = self.pop_mark(at)?;
                    let dict = self.target_dict(mark, at)?;
                    self.set_items(dict, mark, at)?;
                }
                op::DICT => {
                    let mark = self.pop_mark(at)?;
                    let dict = self.objects.new_dict().ok_or_else(|| self.too_many(at))?;
                    self.set_items(dict, mark, at)?;
                    self.stack.push(Value::Dict(dict));
                }
                op::APPEND => {
                    let item = self.pop(at)?;
                    let list = self.target_list(self.stack.len(), at)?;
                    self.objects.append(list, item);
                }
                op::APPENDS => {
                    let mark = self.pop_mark(at)?;
                    let list = self.target_list(mark, at)?;
                    self.append_items(list, mark);
                }
                op::LIST => {
                    let mark = self.pop_mark(at)?;
                    let list = self.objects.new_list().ok_or_else(|| self.too_many(at))?;
                    self.append_items(list, mark);
                    self.stack.push(Value::List(list));
                }
                op::TUPLE1 | op::TUPLE2 | op::TUPLE3 => {
                    for _ in 0..(code - op::TUPLE1 + 1) {
                        self.pop(at)?;
                    }
                    self.stack.push(Value::Opaque(Opaque::Tuple));
                }
                op::TUPLE | op::FROZENSET => {
                    let mark = self.pop_mark(at)?;
                    self.stack.truncate(mark);
                    let kind = if code == op::TUPLE { Opaque::Tuple } else { Opaque::Set };
                    self.stack.push(Value::Opaque(kind));
                }
                op::ADDITEMS => {
                    let mark = self.pop_mark(at)?;
                    match self.below_mark(mark) {
                        Some(Value::Opaque(Opaque::Set)) => self.stack.truncate(mark),
                        found => return Err(self.wrong_target(at, "ADDITEMS", "a set", found)),
                    }
                }
                op::POP => {
                    if self.stack.len() > self.floor() {
                        self.stack.pop();
                    } else {
                        self.pop_mark(at)?;
                    }
                }
                op::POP_MARK => {
                    let mark = self.pop_mark(at)?;
                    self.stack.truncate(mark);
                }
                op::DUP => {
                    let value = self.top(at)?;
                    self.stack.push(value);
                }
                op::READONLY_BUFFER => {
                    self.top(at)?;
                }
                op::PROTO => {
                    let protocol = self.byte(at)?;
                    if protocol > op::HIGHEST_PROTOCOL {
                        return Err(self.malformed(at, format!("pickle protocol {protocol} is newer than 5")));
                    }
                }
                op::FRAME => {
                    self.array::<8>(at)?;
                }
                op::STOP => {
                    let root = self.pop(at)?;
                    return Ok(Decoded { root, objects: self.objects });
                }
                _ if op::imports_or_calls(code) => {
                    return Err(Error::PickleForbidden {
                        name: self.name.to_owned(),
                        opcode: op::name(code).unwrap_or("unknown"),
                        offset: at as u64,
                    });
                }
                _ => {
                    return Err(Error::PickleUnsupported {
                        name: self.name.to_owned(),
                        opcode: op::name(code).unwrap_or("unknown"),
                        code,
                        offset: at as u64,
                    });
                }
            }
        }
    }

    // ---- reading the opcode arguments

    #[inline]
    fn take(&mut self, len: usize, at: usize) -> Result<&'a [u8]> {
        let data = self.data;
        match self.pos.checked_add(len) {
            Some(end) if end <= data.len() => {
                let bytes = &data[self.pos..end];
                self.pos = end;
                Ok(bytes)
            }
            _ => Err(self.truncated(at)),
        }
    }

    #[inline]
    fn byte(&mut self, at: usize) -> Result<u8> {
        match self.data.get(self.pos) {
            Some(&byte) => {
                self.pos += 1;
                Ok(byte)
            }
            None => Err(self.truncated(at)),
        }
    }

    #[inline]
    fn array<const N: usize>(&mut self, at: usize) -> Result<[u8; N]> {
        let bytes = self.take(N, at)?;
        let mut array = [0; N];
        array.copy_from_slice(bytes);
        Ok(array)
    }

    /// An 8-byte length, which must fit the data.
    fn length8(&mut self, at: usize) -> Result<usize> {
        let len = u64::from_le_bytes(self.array(at)?);
        usize::try_from(len).map_err(|_| self.truncated(at))
    }

    /// The bytes up to the next newline (which is consumed, not returned).
    fn line(&mut self, at: usize) -> Result<&'a [u8]> {
        let data = self.data;
        let rest = &data[self.pos..];
        let len = rest.iter().position(|&b| b == b'\n').ok_or_else(|| self.truncated(at))?;
        self.pos += len + 1;
        Ok(&rest[..len])
    }

    /// A memo index written in decimal on its own line.
    fn decimal_line(&mut self, at: usize) -> Result<usize> {
        let line = self.line(at)?;
        std::str::from_utf8(line)
            .ok()
            .and_then(|text| text.trim().parse::<usize>().ok())
            .ok_or_else(|| self.malformed(at, "memo index is not a decimal number"))
    }

    /// An int written in decimal (INT, LONG).
    fn decimal_value(&self, digits: &[u8], at: usize) -> Result<Value> {
        let text = std::str::from_utf8(digits).map(str::trim).unwrap_or("");
        if let Ok(value) = text.parse::<i64>() {
            return Ok(Value::Int(value));
        }
        if let Ok(value) = text.parse::<u64>() {
            return Ok(Value::BigUint(value));
        }
        let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
        if !unsigned.is_empty() && unsigned.bytes().all(|b| b.is_ascii_digit()) {
            return Ok(Value::Opaque(Opaque::BigInt));
        }
        Err(self.malformed(at, "integer argument is not a decimal number"))
    }

    // ---- the stack, the marks and the memo

    /// The stack length below which the innermost open MARK forbids popping.
    #[inline]
    fn floor(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    #[inline]
    fn pop(&mut self, at: usize) -> Result<Value> {
        if self.stack.len() <= self.floor() {
            return Err(self.malformed(at, "the stack is empty"));
        }
        self.stack.pop().ok_or_else(|| self.malformed(at, "the stack is empty"))
    }

    #[inline]
    fn top(&self, at: usize) -> Result<Value> {
        match self.stack.last() {
            Some(&value) if self.stack.len() > self.floor() => Ok(value),
            _ => Err(self.malformed(at, "the stack is empty")),
        }
    }

    #[inline]
    fn pop_mark(&mut self, at: usize) -> Result<usize> {
        self.marks.pop().ok_or_else(|| self.malformed(at, "no MARK is open"))
    }

    /// The value just below `mark` (the object that MARK-ed items go into), if the stack has one there.
    #[inline]
    fn below_mark(&self, mark: usize) -> Option<Value> {
        if mark > self.floor() { self.stack.get(mark - 1).copied() } else { None }
    }

    #[inline]
    fn target_dict(&self, mark: usize, at: usize) -> Result<u32> {
        match self.below_mark(mark) {
            Some(Value::Dict(dict)) => Ok(dict),
            found => Err(self.wrong_target(at, op::name(self.data[at]).unwrap_or("SETITEM"), "a dict", found)),
        }
    }

    #[inline]
    fn target_list(&self, mark: usize, at: usize) -> Result<u32> {
        match self.below_mark(mark) {
            Some(Value::List(list)) => Ok(list),
            found => Err(self.wrong_target(at, op::name(self.data[at]).unwrap_or("APPEND"), "a list", found)),
        }
    }

    /// Sets the key-value pairs from `mark` to the top of the stack into `dict`, and pops them.
    #[inline]
    fn set_items(&mut self, dict: u32, mark: usize, at: usize) -> Result<()> {
        let items = &self.stack[mark..];
        if items.len() % 2 != 0 {
            return Err(self.malformed(at, format!("{} items after MARK: keys and values do not pair", items.len())));
        }
        for pair in items.chunks_exact(2) {
            self.objects.set_item(dict, pair[0], pair[1]);
        }
        self.stack.truncate(mark);
        Ok(())
    }

    /// Appends the items from `mark` to the top of the stack to `list`, and pops them.
    #[inline]
    fn append_items(&mut self, list: u32, mark: usize) {
        for &item in &self.stack[mark..] {
            self.objects.append(list, item);
        }
        self.stack.truncate(mark);
    }

    #[inline]
    fn get(&mut self, index: usize, at: usize) -> Result<()> {
        match self.memo.get(index) {
            Some(&Some(value)) => {
                self.stack.push(value);
                Ok(())
            }
            _ => Err(self.malformed(at, format!("memo entry {index} is not set"))),
        }
    }

    fn put(&mut self, index: usize, at: usize) -> Result<()> {
        let value = self.top(at)?;
        if index > self.data.len() {
            return Err(self.malformed(at, format!("memo index {index} is larger than the pickle")));
        }
        if index >= self.memo.len() {
            self.memo.resize(index + 1, None);
        }
        self.memo[index] = Some(value);
        Ok(())
    }

    // ---- errors

    #[cold]
    fn truncated(&self, at: usize) -> Error {
        Error::PickleTruncated { name: self.name.to_owned(), offset: at as u64 }
    }

    #[cold]
    fn malformed(&self, at: usize, reason: impl Into<String>) -> Error {
        Error::PickleMalformed { name: self.name.to_owned(), offset: at as u64, reason: reason.into() }
    }

    #[cold]
    fn too_many(&self, at: usize) -> Error {
        self.malformed(at, "more than 4,294,967,295 lists or dicts")
    }

    #[cold]
    fn wrong_target(&self, at: usize, opcode: &str, expected: &str, found: Option<Value>) -> Error {
        let found = found.map_or("nothing", Value::describe);
        self.malformed(at, format!("{opcode} needs {expected} below its items, found {found}"))
    }
}

/// The int of a little-endian two's-complement byte string (LONG1, LONG4).
fn long_value(bytes: &[u8]) -> Value {
    let Some(&last) = bytes.last() else {
        return Value::Int(0);
    };
    let negative = last & 0x80 != 0;
    let extension = if negative { 0xff } else { 0 };
    if bytes.len() <= 8 {
        let mut buffer = [extension; 8];
        buffer[..bytes.len()].copy_from_slice(bytes);
        return Value::Int(i64::from_le_bytes(buffer));
    }
    let (low, high) = bytes.split_at(8);
    if !high.iter().all(|&b| b == extension) {
        return Value::Opaque(Opaque::BigInt);
    }
    let mut buffer = [0; 8];
    buffer.copy_from_slice(low);
    let value = u64::from_le_bytes(buffer);
    match (negative, value >> 63 == 1) {
        (false, false) | (true, true) => Value::Int(value as i64),
        (false, true) => Value::BigUint(value),
        (true, false) => Value::Opaque(Opaque::BigInt),
    }
}

/// The symbol of a text-protocol string: one with escapes is none of the words a reader looks for.
fn text_symbol(text: &[u8]) -> Symbol {
    if text.contains(&b'\\') { Symbol::Other } else { Symbol::of(text) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_values_cover_the_64_bit_edges() {
        assert_eq!(long_value(&[]), Value::Int(0));
        assert_eq!(long_value(&[0xff]), Value::Int(-1));
        assert_eq!(long_value(&[0x00, 0x80]), Value::Int(-32768));
        assert_eq!(long_value(&[0xff, 0x7f]), Value::Int(32767));
        // 2^63 needs a ninth byte for the sign.
        assert_eq!(long_value(&[0, 0, 0, 0, 0, 0, 0, 0x80, 0]), Value::BigUint(1 << 63));
        assert_eq!(long_value(&[0xff; 9]), Value::Int(-1));
        assert_eq!(long_value(&[0, 0, 0, 0, 0, 0, 0, 0x80, 0xff]), Value::Int(i64::MIN));
        assert_eq!(long_value(&[0, 0, 0, 0, 0, 0, 0, 0, 1]), Value::Opaque(Opaque::BigInt));
        assert_eq!(long_value(&[0, 0, 0, 0, 0, 0, 0, 0x7f, 0xff]), Value::Opaque(Opaque::BigInt));
    }

    #[test]
    fn a_dict_keeps_only_trace_entry_keys() {
        // {'action': 'alloc', 'frames': [1], 'addr': 16} as protocol 4 would write it.
        let mut pickle = vec![0x80, 4, b'}', b'('];
        for (key, value) in [(&b"action"[..], &b"alloc"[..]), (b"frames", b"")] {
            pickle.extend([op::SHORT_BINUNICODE, key.len() as u8]);
            pickle.extend(key);
            if value.is_empty() {
                pickle.extend([b']', op::BININT1, 1, b'a']);
            } else {
                pickle.extend([op::SHORT_BINUNICODE, value.len() as u8]);
                pickle.extend(value);
            }
        }
        pickle.extend([op::SHORT_BINUNICODE, 4]);
        pickle.extend(b"addr");
        pickle.extend([op::BININT1, 16, b'u', b'.']);
        let decoded = decode("test", &pickle).unwrap();
        let Value::Dict(dict) = decoded.root else { panic!("root is {:?}", decoded.root) };
        use super::super::symbol::Field;
        assert_eq!(decoded.objects.field(dict, Field::Action), Some(Value::Str(Symbol::Alloc)));
        assert_eq!(decoded.objects.field(dict, Field::Addr), Some(Value::Int(16)));
        assert_eq!(decoded.objects.field(dict, Field::Size), None);
    }

    #[test]
    fn popping_past_a_mark_is_malformed() {
        let error = decode("test", &[0x80, 2, op::BININT1, 1, op::MARK, op::TUPLE1, b'.']).err().unwrap();
        assert!(matches!(error, Error::PickleMalformed { offset: 5, .. }), "{error}");
    }
}
