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

use super::memo::{MAX_MEMO_ENTRIES, Memo};
use super::objects::{MAX_LIST_ITEMS, Objects};
use super::opcode as op;
use super::symbol::Symbol;
use super::value::{Opaque, Value};
use crate::content::{Content, Line};
use crate::error::{Error, Result};
use crate::memory_budget;

/// The deepest the machine's stack may grow, values and open MARKs together. Python's pickler writes at most
/// 1000 items between a MARK and the opcode that takes them, and snapshots nest a few levels deep.
pub(crate) const MAX_STACK_DEPTH: usize = 1 << 20;

/// The longest argument line of a text opcode (INT, LONG, FLOAT, STRING, UNICODE, GET, PUT of protocols 0
/// and 1), newline excluded.
pub(crate) const MAX_LINE_BYTES: usize = 64 << 10;

/// LONG1 and LONG4 arguments are read this many bytes at a time.
const LONG_PIECE_BYTES: usize = 4096;

/// The longest string whose text is looked at: a longer one is none of the words a snapshot reader looks for,
/// and is skipped unread.
const MAX_SYMBOL_BYTES: u64 = 32;

/// A decoded pickle: its value and the lists and dicts it refers to.
pub(crate) struct Decoded {
    /// The pickled value.
    pub(crate) root: Value,
    /// The lists and dicts, by handle.
    pub(crate) objects: Objects,
}

/// Decodes the pickle that is the whole of `content`: bytes after its STOP opcode are an error.
pub(crate) fn decode(content: &mut Content<'_>) -> Result<Decoded> {
    let size = usize::try_from(content.size_hint()).unwrap_or(usize::MAX);
    Machine {
        name: content.name(),
        input: content,
        stack: Vec::with_capacity(64),
        marks: Vec::with_capacity(16),
        // A snapshot memoizes about one value per 25 bytes.
        memo: Memo::with_capacity(size / 25),
        objects: Objects::for_pickle_of(size),
        next_check: 0,
    }
    .run()
}

/// The pickle machine: the stack, the marks into it, the memo, and the objects built.
struct Machine<'c, 'r> {
    name: &'r str,
    input: &'c mut Content<'r>,
    stack: Vec<Value>,
    /// Stack lengths at each MARK still open.
    marks: Vec<usize>,
    memo: Memo,
    objects: Objects,
    /// The content offset at which the memory held is next checked against the budget.
    next_check: u64,
}

impl Machine<'_, '_> {
    fn run(mut self) -> Result<Decoded> {
        loop {
            let at = self.input.offset();
            if at >= self.next_check {
                self.check_memory(at)?;
            }
            let Some(code) = self.input.byte()? else {
                return Err(truncated(self.name, at));
            };
            match code {
                op::BINGET => {
                    let index = self.byte(at)?;
                    self.get(u64::from(index), at)?;
                }
                op::LONG_BINGET => {
                    let index = u32::from_le_bytes(self.array(at)?);
                    self.get(u64::from(index), at)?;
                }
                op::GET => {
                    let index = self.decimal_line(at)?;
                    self.get(index, at)?;
                }
                op::MEMOIZE => {
                    let value = self.top(at)?;
                    self.memo.memoize(value).map_err(|_| self.memo_full(at))?;
                }
                op::BINPUT => {
                    let index = self.byte(at)?;
                    self.put(u64::from(index), at)?;
                }
                op::LONG_BINPUT => {
                    let index = u32::from_le_bytes(self.array(at)?);
                    self.put(u64::from(index), at)?;
                }
                op::PUT => {
                    let index = self.decimal_line(at)?;
                    self.put(index, at)?;
                }
                op::BININT1 => {
                    let value = self.byte(at)?;
                    self.push(Value::Int(i64::from(value)), at)?;
                }
                op::BININT2 => {
                    let value = u16::from_le_bytes(self.array(at)?);
                    self.push(Value::Int(i64::from(value)), at)?;
                }
                op::BININT => {
                    let value = i32::from_le_bytes(self.array(at)?);
                    self.push(Value::Int(i64::from(value)), at)?;
                }
                op::LONG1 => {
                    let len = self.byte(at)?;
                    let value = self.long(u64::from(len), at)?;
                    self.push(value, at)?;
                }
                op::LONG4 => {
                    let len = i32::from_le_bytes(self.array(at)?);
                    let len = u64::try_from(len)
                        .map_err(|_| malformed(self.name, at, format!("LONG4 length {len} is negative")))?;
                    let value = self.long(len, at)?;
                    self.push(value, at)?;
                }
                op::INT => {
                    let name = self.name;
                    let value = match self.line(at)? {
                        b"00" => Some(Value::Bool(false)),
                        b"01" => Some(Value::Bool(true)),
                        line => decimal_value(line),
                    };
                    let value = value.ok_or_else(|| not_decimal(name, at))?;
                    self.push(value, at)?;
                }
                op::LONG => {
                    let name = self.name;
                    let line = self.line(at)?;
                    let value =
                        decimal_value(line.strip_suffix(b"L").unwrap_or(line)).ok_or_else(|| not_decimal(name, at))?;
                    self.push(value, at)?;
                }
                op::BINFLOAT => {
                    let value = f64::from_be_bytes(self.array(at)?);
                    self.push(Value::Float(value), at)?;
                }
                op::FLOAT => {
                    let name = self.name;
                    let line = self.line(at)?;
                    let value = std::str::from_utf8(line).ok().and_then(|text| text.trim().parse::<f64>().ok());
                    let value = value.ok_or_else(|| malformed(name, at, "FLOAT argument is not a number"))?;
                    self.push(Value::Float(value), at)?;
                }
                op::NONE => self.push(Value::None, at)?,
                op::NEWTRUE => self.push(Value::Bool(true), at)?,
                op::NEWFALSE => self.push(Value::Bool(false), at)?,
                op::SHORT_BINUNICODE | op::SHORT_BINSTRING => {
                    let len = self.byte(at)?;
                    let symbol = self.text(u64::from(len), at)?;
                    self.push(Value::Str(symbol), at)?;
                }
                op::BINUNICODE | op::BINSTRING => {
                    let len = u32::from_le_bytes(self.array(at)?);
                    let symbol = self.text(u64::from(len), at)?;
                    self.push(Value::Str(symbol), at)?;
                }
                op::BINUNICODE8 => {
                    let len = u64::from_le_bytes(self.array(at)?);
                    let symbol = self.text(len, at)?;
                    self.push(Value::Str(symbol), at)?;
                }
                op::UNICODE => {
                    // raw-unicode-escape: the words a reader looks for have no escapes.
                    let symbol = text_symbol(self.line(at)?);
                    self.push(Value::Str(symbol), at)?;
                }
                op::STRING => {
                    let name = self.name;
                    let symbol = match self.line(at)? {
                        [b'\'', inner @ .., b'\''] | [b'"', inner @ .., b'"'] => text_symbol(inner),
                        _ => return Err(malformed(name, at, "STRING argument is not quoted")),
                    };
                    self.push(Value::Str(symbol), at)?;
                }
                op::SHORT_BINBYTES => {
                    let len = self.byte(at)?;
                    self.skip(u64::from(len), at)?;
                    self.push(Value::Opaque(Opaque::Bytes), at)?;
                }
                op::BINBYTES => {
                    let len = u32::from_le_bytes(self.array(at)?);
                    self.skip(u64::from(len), at)?;
                    self.push(Value::Opaque(Opaque::Bytes), at)?;
                }
                op::BINBYTES8 | op::BYTEARRAY8 => {
                    let len = u64::from_le_bytes(self.array(at)?);
                    self.skip(len, at)?;
                    self.push(Value::Opaque(Opaque::Bytes), at)?;
                }
                op::EMPTY_DICT => {
                    let dict = self.objects.new_dict().ok_or_else(|| self.too_many(at))?;
                    self.push(Value::Dict(dict), at)?;
                }
                op::EMPTY_LIST => {
                    let list = self.objects.new_list().ok_or_else(|| self.too_many(at))?;
                    self.push(Value::List(list), at)?;
                }
                op::EMPTY_TUPLE => self.push(Value::Opaque(Opaque::Tuple), at)?,
                op::EMPTY_SET => self.push(Value::Opaque(Opaque::Set), at)?,
                op::MARK => {
                    self.check_depth(at)?;
                    self.marks.push(self.stack.len());
                }
                op::SETITEM => {
                    let value = self.pop(at)?;
                    let key = self.pop(at)?;
                    let dict = self.target_dict(self.stack.len(), code, at)?;
                    self.objects.set_item(dict, key, value);
                }
                op::SETITEMS => {
                    let mark = self.pop_mark(at)?;
                    let dict = self.target_dict(mark, code, at)?;
                    self.set_items(dict, mark, at)?;
                }
                op::DICT => {
                    let mark = self.pop_mark(at)?;
                    let dict = self.objects.new_dict().ok_or_else(|| self.too_many(at))?;
                    self.set_items(dict, mark, at)?;
                    self.push(Value::Dict(dict), at)?;
                }
                op::APPEND => {
                    let item = self.pop(at)?;
                    let list = self.target_list(self.stack.len(), code, at)?;
                    self.objects.append(list, item).map_err(|_| self.list_full(at))?;
                }
                op::APPENDS => {
                    let mark = self.pop_mark(at)?;
                    let list = self.target_list(mark, code, at)?;
                    self.append_items(list, mark, at)?;
                }
                op::LIST => {
                    let mark = self.pop_mark(at)?;
                    let list = self.objects.new_list().ok_or_else(|| self.too_many(at))?;
                    self.append_items(list, mark, at)?;
                    self.push(Value::List(list), at)?;
                }
                op::TUPLE1 | op::TUPLE2 | op::TUPLE3 => {
                    for _ in 0..(code - op::TUPLE1 + 1) {
                        self.pop(at)?;
                    }
                    self.push(Value::Opaque(Opaque::Tuple), at)?;
                }
                op::TUPLE | op::FROZENSET => {
                    let mark = self.pop_mark(at)?;
                    self.stack.truncate(mark);
                    let kind = if code == op::TUPLE { Opaque::Tuple } else { Opaque::Set };
                    self.push(Value::Opaque(kind), at)?;
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
                    self.push(value, at)?;
                }
                op::READONLY_BUFFER => {
                    self.top(at)?;
                }
                op::PROTO => {
                    let protocol = self.byte(at)?;
                    if protocol > op::HIGHEST_PROTOCOL {
                        return Err(malformed(self.name, at, format!("pickle protocol {protocol} is newer than 5")));
                    }
                }
                op::FRAME => {
                    self.array::<8>(at)?;
                }
                op::STOP => {
                    let root = self.pop(at)?;
                    if !self.input.at_end()? {
                        return Err(Error::PickleTrailingData { name: self.name.to_owned(), offset: at + 1 });
                    }
                    return Ok(Decoded { root, objects: self.objects });
                }
                _ if op::imports_or_calls(code) => {
                    return Err(Error::PickleForbidden {
                        name: self.name.to_owned(),
                        opcode: op::name(code).unwrap_or("unknown"),
                        offset: at,
                    });
                }
                _ => {
                    return Err(Error::PickleUnsupported {
                        name: self.name.to_owned(),
                        opcode: op::name(code).unwrap_or("unknown"),
                        code,
                        offset: at,
                    });
                }
            }
        }
    }

    /// Checks the memory the decoding holds against the budget of the file read so far.
    #[cold]
    fn check_memory(&mut self, at: u64) -> Result<()> {
        self.next_check = at.saturating_add(memory_budget::CHECK_EVERY);
        let held = self.stack.capacity() * size_of::<Value>() + self.marks.capacity() * size_of::<usize>();
        let held = held as u64 + self.memo.held_bytes() + self.objects.held_bytes();
        memory_budget::check(self.name, held, self.input.file_bytes())
    }

    // ---- reading the opcode arguments

    #[inline]
    fn byte(&mut self, at: u64) -> Result<u8> {
        self.input.byte()?.ok_or_else(|| truncated(self.name, at))
    }

    #[inline]
    fn array<const N: usize>(&mut self, at: u64) -> Result<[u8; N]> {
        match self.input.take(N)? {
            Some(bytes) => {
                let mut array = [0; N];
                array.copy_from_slice(bytes);
                Ok(array)
            }
            None => Err(truncated(self.name, at)),
        }
    }

    /// Consumes `len` bytes of the opcode's argument.
    fn skip(&mut self, len: u64, at: u64) -> Result<()> {
        if self.input.skip(len)? { Ok(()) } else { Err(truncated(self.name, at)) }
    }

    /// The symbol of the string of `len` bytes that follows.
    #[inline]
    fn text(&mut self, len: u64, at: u64) -> Result<Symbol> {
        if len > MAX_SYMBOL_BYTES {
            self.skip(len, at)?;
            return Ok(Symbol::Other);
        }
        match self.input.take(len as usize)? {
            Some(text) => Ok(Symbol::of(text)),
            None => Err(truncated(self.name, at)),
        }
    }

    /// The int of the `len` little-endian two's-complement bytes that follow (LONG1, LONG4).
    #[inline]
    fn long(&mut self, len: u64, at: u64) -> Result<Value> {
        if len > LONG_PIECE_BYTES as u64 {
            return self.long_in_pieces(len, at);
        }
        match self.input.take(len as usize)? {
            Some(bytes) => Ok(long_value(bytes)),
            None => Err(truncated(self.name, at)),
        }
    }

    /// [`Machine::long`] for a long argument, read in pieces: its first 8 bytes, and whether every later byte
    /// extends the sign of the last one.
    #[cold]
    fn long_in_pieces(&mut self, len: u64, at: u64) -> Result<Value> {
        let mut low = [0; 8];
        low.copy_from_slice(self.input.take(8)?.ok_or_else(|| truncated(self.name, at))?);
        let (mut all_zero, mut all_ones, mut last) = (true, true, 0);
        let mut left = len - 8;
        while left > 0 {
            let piece = left.min(LONG_PIECE_BYTES as u64) as usize;
            let bytes = self.input.take(piece)?.ok_or_else(|| truncated(self.name, at))?;
            all_zero &= bytes.iter().all(|&b| b == 0);
            all_ones &= bytes.iter().all(|&b| b == 0xff);
            last = bytes[piece - 1];
            left -= piece as u64;
        }
        let extension = if last & 0x80 != 0 { 0xff } else { 0 };
        let extends = if extension == 0xff { all_ones } else { all_zero };
        let mut bytes = [extension; 17];
        bytes[..8].copy_from_slice(&low);
        Ok(if extends { long_value(&bytes) } else { Value::Opaque(Opaque::BigInt) })
    }

    /// The bytes up to the next newline (which is consumed, not returned).
    fn line(&mut self, at: u64) -> Result<&[u8]> {
        let name = self.name;
        match self.input.line(MAX_LINE_BYTES)? {
            Line::Ended(line) => Ok(line),
            Line::TooLong => Err(limit(name, at, "an argument line longer than", MAX_LINE_BYTES as u64)),
            Line::Last(_) | Line::End => Err(truncated(name, at)),
        }
    }

    /// A memo index written in decimal on its own line.
    fn decimal_line(&mut self, at: u64) -> Result<u64> {
        let name = self.name;
        let line = self.line(at)?;
        std::str::from_utf8(line)
            .ok()
            .and_then(|text| text.trim().parse::<u64>().ok())
            .ok_or_else(|| malformed(name, at, "memo index is not a decimal number"))
    }

    // ---- the stack, the marks and the memo

    /// The stack length below which the innermost open MARK forbids popping.
    #[inline]
    fn floor(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    /// Whether the stack has room for one more value or MARK.
    #[inline]
    fn check_depth(&self, at: u64) -> Result<()> {
        if self.stack.len() + self.marks.len() < MAX_STACK_DEPTH {
            Ok(())
        } else {
            Err(limit(self.name, at, "more stack entries (values and open MARKs) than", MAX_STACK_DEPTH as u64))
        }
    }

    #[inline]
    fn push(&mut self, value: Value, at: u64) -> Result<()> {
        self.check_depth(at)?;
        self.stack.push(value);
        Ok(())
    }

    #[inline]
    fn pop(&mut self, at: u64) -> Result<Value> {
        if self.stack.len() <= self.floor() {
            return Err(malformed(self.name, at, "the stack is empty"));
        }
        self.stack.pop().ok_or_else(|| malformed(self.name, at, "the stack is empty"))
    }

    #[inline]
    fn top(&self, at: u64) -> Result<Value> {
        match self.stack.last() {
            Some(&value) if self.stack.len() > self.floor() => Ok(value),
            _ => Err(malformed(self.name, at, "the stack is empty")),
        }
    }

    #[inline]
    fn pop_mark(&mut self, at: u64) -> Result<usize> {
        self.marks.pop().ok_or_else(|| malformed(self.name, at, "no MARK is open"))
    }

    /// The value just below `mark` (the object that MARK-ed items go into), if the stack has one there.
    #[inline]
    fn below_mark(&self, mark: usize) -> Option<Value> {
        if mark > self.floor() { self.stack.get(mark - 1).copied() } else { None }
    }

    #[inline]
    fn target_dict(&self, mark: usize, code: u8, at: u64) -> Result<u32> {
        match self.below_mark(mark) {
            Some(Value::Dict(dict)) => Ok(dict),
            found => Err(self.wrong_target(at, op::name(code).unwrap_or("SETITEM"), "a dict", found)),
        }
    }

    #[inline]
    fn target_list(&self, mark: usize, code: u8, at: u64) -> Result<u32> {
        match self.below_mark(mark) {
            Some(Value::List(list)) => Ok(list),
            found => Err(self.wrong_target(at, op::name(code).unwrap_or("APPEND"), "a list", found)),
        }
    }

    /// Sets the key-value pairs from `mark` to the top of the stack into `dict`, and pops them.
    #[inline]
    fn set_items(&mut self, dict: u32, mark: usize, at: u64) -> Result<()> {
        let items = &self.stack[mark..];
        if items.len() % 2 != 0 {
            return Err(malformed(
                self.name,
                at,
                format!("{} items after MARK: keys and values do not pair", items.len()),
            ));
        }
        for pair in items.chunks_exact(2) {
            self.objects.set_item(dict, pair[0], pair[1]);
        }
        self.stack.truncate(mark);
        Ok(())
    }

    /// Appends the items from `mark` to the top of the stack to `list`, and pops them.
    #[inline]
    fn append_items(&mut self, list: u32, mark: usize, at: u64) -> Result<()> {
        for &item in &self.stack[mark..] {
            if self.objects.append(list, item).is_err() {
                return Err(self.list_full(at));
            }
        }
        self.stack.truncate(mark);
        Ok(())
    }

    #[inline(always)]
    fn get(&mut self, index: u64, at: u64) -> Result<()> {
        self.check_depth(at)?;
        match self.memo.get(index) {
            Some(value) => {
                self.stack.push(*value);
                Ok(())
            }
            None => Err(malformed(self.name, at, format!("memo entry {index} is not set"))),
        }
    }

    fn put(&mut self, index: u64, at: u64) -> Result<()> {
        let value = self.top(at)?;
        self.memo.put(index, value).map_err(|_| self.memo_full(at))
    }

    // ---- errors

    #[cold]
    fn too_many(&self, at: u64) -> Error {
        malformed(self.name, at, "more than 4,294,967,295 lists or dicts")
    }

    #[cold]
    fn memo_full(&self, at: u64) -> Error {
        limit(self.name, at, "more memo entries than", MAX_MEMO_ENTRIES as u64)
    }

    #[cold]
    fn list_full(&self, at: u64) -> Error {
        limit(self.name, at, "a list of more items than", u64::from(MAX_LIST_ITEMS))
    }

    #[cold]
    fn wrong_target(&self, at: u64, opcode: &str, expected: &str, found: Option<Value>) -> Error {
        let found = found.map_or("nothing", Value::describe);
        malformed(self.name, at, format!("{opcode} needs {expected} below its items, found {found}"))
    }
}

#[cold]
fn truncated(name: &str, at: u64) -> Error {
    Error::PickleTruncated { name: name.to_owned(), offset: at }
}

#[cold]
fn malformed(name: &str, at: u64, reason: impl Into<String>) -> Error {
    Error::PickleMalformed { name: name.to_owned(), offset: at, reason: reason.into() }
}

#[cold]
fn not_decimal(name: &str, at: u64) -> Error {
    malformed(name, at, "integer argument is not a decimal number")
}

#[cold]
fn limit(name: &str, at: u64, what: &'static str, limit: u64) -> Error {
    Error::PickleLimit { name: name.to_owned(), offset: at, what, limit }
}

/// An int written in decimal (INT, LONG); `None` if the text is not a decimal number.
fn decimal_value(digits: &[u8]) -> Option<Value> {
    let text = std::str::from_utf8(digits).map(str::trim).unwrap_or("");
    if let Ok(value) = text.parse::<i64>() {
        return Some(Value::Int(value));
    }
    if let Ok(value) = text.parse::<u64>() {
        return Some(Value::BigUint(value));
    }
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    (!unsigned.is_empty() && unsigned.bytes().all(|b| b.is_ascii_digit())).then_some(Value::Opaque(Opaque::BigInt))
}

/// The int of a little-endian two's-complement byte string (LONG1, LONG4).
fn long_value(bytes: &[u8]) -> Value {
    let Some(&last) = bytes.last() else {
        return Value::Int(0);
    };
    let negative = last & 0x80 != 0;
    let extension = if negative { 0xff } else { 0 };
    if bytes.len() <= 8 {
        // Byte by byte, not through a buffer: a variable-length copy followed by a whole-word read stalls.
        let value = bytes.iter().rev().fold(0u64, |value, &b| (value << 8) | u64::from(b));
        let sign = if negative && bytes.len() < 8 { u64::MAX << (8 * bytes.len()) } else { 0 };
        return Value::Int((value | sign) as i64);
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

    /// The pickle `bytes` decoded.
    fn decode_bytes(bytes: &[u8]) -> Result<Decoded> {
        decode(&mut Content::open("test", bytes, u64::MAX)?)
    }

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
        let decoded = decode_bytes(&pickle).unwrap();
        let Value::Dict(dict) = decoded.root else { panic!("root is {:?}", decoded.root) };
        use super::super::symbol::Field;
        assert_eq!(decoded.objects.field(dict, Field::Action), Some(Value::Str(Symbol::Alloc)));
        assert_eq!(decoded.objects.field(dict, Field::Addr), Some(Value::Int(16)));
        assert_eq!(decoded.objects.field(dict, Field::Size), None);
    }

    #[test]
    fn popping_past_a_mark_is_malformed() {
        let error = decode_bytes(&[0x80, 2, op::BININT1, 1, op::MARK, op::TUPLE1, b'.']).err().unwrap();
        assert!(matches!(error, Error::PickleMalformed { offset: 5, .. }), "{error}");
    }

    #[test]
    fn a_long_int_argument_is_read_in_pieces_by_its_sign() {
        // LONG4 of 8 value bytes and 10,000 more that extend (or do not extend) the sign.
        let long4 = |low: [u8; 8], rest: u8, last: u8| {
            let mut pickle = vec![0x80, 2, op::LONG4];
            pickle.extend(10_008i32.to_le_bytes());
            pickle.extend(low);
            pickle.extend(std::iter::repeat_n(rest, 9_999));
            pickle.extend([last, b'.']);
            decode_bytes(&pickle).unwrap().root
        };
        assert_eq!(long4(5u64.to_le_bytes(), 0, 0), Value::Int(5));
        assert_eq!(long4((-5i64).to_le_bytes(), 0xff, 0xff), Value::Int(-5));
        assert_eq!(long4(u64::MAX.to_le_bytes(), 0, 0), Value::BigUint(u64::MAX));
        assert_eq!(long4(5u64.to_le_bytes(), 0, 1), Value::Opaque(Opaque::BigInt));
        assert_eq!(long4(5u64.to_le_bytes(), 0xff, 0xff), Value::Opaque(Opaque::BigInt));
    }

    #[test]
    fn marks_count_toward_the_stack_limit() {
        let mut pickle = vec![0x80, 2];
        pickle.extend(std::iter::repeat_n(op::MARK, MAX_STACK_DEPTH - 1));
        pickle.extend([op::NONE, op::POP, op::MARK, op::NONE]);
        let error = decode_bytes(&pickle).err().unwrap();
        let expected = 2 + MAX_STACK_DEPTH as u64 + 2;
        assert!(matches!(error, Error::PickleLimit { offset, .. } if offset == expected), "{error}");
    }

    #[test]
    fn huge_string_and_bytes_lengths_are_truncations_not_allocations() {
        for opcode in [op::BINUNICODE8, op::BINBYTES8, op::BYTEARRAY8] {
            let mut pickle = vec![0x80, 5, opcode];
            pickle.extend(u64::MAX.to_le_bytes());
            pickle.extend(b"abc.");
            let error = decode_bytes(&pickle).err().unwrap();
            assert!(matches!(error, Error::PickleTruncated { offset: 2, .. }), "{error}");
        }
    }

    #[test]
    fn a_text_line_past_the_limit_is_refused_and_one_at_the_limit_reads() {
        for (digits, reads) in [(MAX_LINE_BYTES, true), (MAX_LINE_BYTES + 1, false)] {
            let mut pickle = vec![op::INT];
            pickle.extend(std::iter::repeat_n(b'7', digits));
            pickle.extend(b"\n.");
            match decode_bytes(&pickle) {
                Ok(decoded) => assert!(reads && decoded.root == Value::Opaque(Opaque::BigInt)),
                Err(error) => assert!(!reads && matches!(error, Error::PickleLimit { offset: 0, .. }), "{error}"),
            }
        }
    }
}
