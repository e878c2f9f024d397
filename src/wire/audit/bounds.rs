//! The bounds on what a caller puts into an audit entry: the one place that knows them, and the
//! two ways an entry keeps within them.
//!
//! An entry is written once and then read by every list page, export and detail read that
//! meets it, for as long as the plan keeps it: whatever a caller can make large there is
//! multiplied by every later read, another tenant's included (they share the server). So every
//! caller-supplied field has a bound, and over it the field is either **refused** (400 naming
//! the field: `X-Audit-Metadata is 300000 bytes; at most 4096 are allowed`), where the caller
//! chose the value and can send a smaller one, or **stored truncated with a marker** saying so
//! and how long the original was, where refusing would lose the record of an operation that
//! happened:
//!
//! | field | bound | over it |
//! |---|---|---|
//! | `user_agent` (the header) | [`USER_AGENT_MAX`] bytes | truncated: [`truncate_text`] |
//! | `X-Audit-Metadata` | [`METADATA_MAX`] bytes (as sent and as stored) | refused |
//! | ingested `model_id`, `project_id`, `gateway_id` | [`ID_TEXT_MAX`] bytes | refused |
//! | ingested `user_agent` | [`USER_AGENT_MAX`] bytes | refused |
//! | ingested `error_msg` | [`ERROR_MSG_MAX`] bytes | refused |
//! | ingested `metadata` | [`METADATA_MAX`] bytes of compact JSON | refused |
//! | ingested `ip_address` | an IPv4 or IPv6 address | refused |
//! | `action` (ingested; a list's filter) | 100 bytes | refused (ingested); truncated (a filter recorded by reference) |
//! | error messages, which may echo input | [`MESSAGE_MAX`] bytes | middle cut: [`clip_message`] |
//! | detail fields (bodies, input/output, `rag_*`, `memory_*`) | `--audit-body-limit` bytes of JSON | marker: [`bounded_value`] |
//!
//! With these a list item is at most a few kilobytes whatever its callers sent, and so is a
//! list page of 100 (docs/API.md states the largest, `tests/it/list_bound.rs` builds it).

use std::borrow::Cow;
use std::io::Write;

use auditmem_projections::AuditDetail;
use serde::Serialize;
use serde_json::{json, Value};

use crate::wire::Invalid;

/// A `User-Agent` is kept whole up to 512 bytes: browsers send 100-300, crawlers and SDKs less;
/// past that it is not a product token but a payload.
pub const USER_AGENT_MAX: usize = 512;
/// `X-Audit-Metadata` and ingested `metadata`: tags (a team, a ticket, a trace id) take tens of
/// bytes each; 4 KiB holds dozens of them and stays under the header sizes proxies accept.
pub const METADATA_MAX: usize = 4096;
/// Ingested identifiers (`model_id`, `project_id`, `gateway_id`): the longest real model ids
/// (provider/org/model-version paths) are under 100 bytes.
pub const ID_TEXT_MAX: usize = 256;
/// Ingested `error_msg`: providers' error messages run to a few hundred bytes; a stack trace
/// or a response body is not a message.
pub const ERROR_MSG_MAX: usize = 1024;
/// An error message of ours, which may quote what the caller sent (a field's value, a key, a
/// time): whole up to 512 bytes, else its first [`MESSAGE_HEAD`] and last [`MESSAGE_TAIL`]
/// bytes, which keep what the message says (the field first, what was expected last).
pub const MESSAGE_MAX: usize = 512;
pub const MESSAGE_HEAD: usize = 320;
pub const MESSAGE_TAIL: usize = 160;
/// Action names (ingestion's rule); a list filter longer than this matches no entry.
pub const ACTION_MAX: usize = 100;

/// The refusal of a field over its bound.
pub fn too_long(field: &str, len: usize, max: usize) -> Invalid {
    Invalid(format!("{field} is {len} bytes; at most {max} are allowed"))
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
fn prefix(s: &str, max: usize) -> &str {
    let mut end = max.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The shortest suffix of `s` of at most `max` bytes that starts on a character boundary.
fn suffix(s: &str, max: usize) -> &str {
    let mut start = s.len().saturating_sub(max);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// `s` whole when it is at most `max` bytes, else its first `max` bytes (at a character
/// boundary) followed by the marker `...[truncated: N bytes]`, N its length.
pub fn truncate_text(s: &str, max: usize) -> Cow<'_, str> {
    if s.len() <= max {
        return Cow::Borrowed(s);
    }
    Cow::Owned(format!(
        "{}...[truncated: {} bytes]",
        prefix(s, max),
        s.len()
    ))
}

/// A message whole when it is at most [`MESSAGE_MAX`] bytes, else its first and last bytes
/// around the marker `...[N bytes cut]...`.
pub fn clip_message(m: &str) -> Cow<'_, str> {
    if m.len() <= MESSAGE_MAX {
        return Cow::Borrowed(m);
    }
    let (head, tail) = (prefix(m, MESSAGE_HEAD), suffix(m, MESSAGE_TAIL));
    let cut = m.len() - head.len() - tail.len();
    Cow::Owned(format!("{head}...[{cut} bytes cut]...{tail}"))
}

/// Bytes of `v`'s compact JSON, counted without writing them anywhere.
pub fn json_len<T: Serialize + ?Sized>(v: &T) -> usize {
    struct Count(usize);
    impl Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    // Counting cannot fail, and the shapes measured here always serialise.
    let _ = serde_json::to_writer(&mut c, v);
    c.0
}

/// Bytes `c` takes inside a JSON string as serde_json writes it.
fn escaped_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// The longest prefix of `s` whose JSON string (without its quotes) is at most `budget` bytes:
/// a marker's `_prefix` stays within its bound even when the text is all quotes or control
/// characters, which JSON writes in two or six bytes each.
fn json_prefix(s: &str, budget: usize) -> &str {
    let mut used = 0;
    for (i, c) in s.char_indices() {
        used += escaped_len(c);
        if used > budget {
            return &s[..i];
        }
    }
    s
}

/// The marker a value over its bound is stored as: `{"_truncated": true, "_original_bytes":
/// N, "_prefix": "..."}`, N the bytes of the original (a body as sent, another field as JSON),
/// `_prefix` its first bytes as text, as many as keep the marker's own JSON within `limit`.
pub fn truncation_marker(text: &str, original_bytes: usize, limit: usize) -> Value {
    // The marker's JSON without its prefix: `{"_original_bytes":N,"_prefix":"","_truncated":true}`.
    let overhead = 52 + original_bytes.to_string().len();
    let budget = limit.saturating_sub(overhead);
    json!({
        "_truncated": true,
        "_original_bytes": original_bytes,
        "_prefix": json_prefix(text, budget),
    })
}

/// `v` when its JSON is at most `limit` bytes, else its [`truncation_marker`], the prefix
/// taken from its JSON text.
pub fn bounded_value(v: Value, limit: usize) -> Value {
    let n = json_len(&v);
    if n <= limit {
        return v;
    }
    truncation_marker(&serde_json::to_string(&v).unwrap_or_default(), n, limit)
}

/// An array field (`rag_results`, `memory_results`) over `limit`: a one-element array holding
/// the marker of its JSON.
fn bounded_values(v: Vec<Value>, limit: usize) -> Vec<Value> {
    let n = json_len(&v);
    if n <= limit {
        return v;
    }
    let text = serde_json::to_string(&v).unwrap_or_default();
    // The array's brackets around the marker.
    vec![truncation_marker(&text, n, limit.saturating_sub(2))]
}

/// An array of strings (`rag_query`, `memory_query`) over `limit`: a one-element array holding
/// the first bytes of its JSON text and `...[truncated: N bytes]` (the element must stay a
/// string), within `limit` as JSON.
fn bounded_strings(v: Vec<String>, limit: usize) -> Vec<String> {
    let n = json_len(&v);
    if n <= limit {
        return v;
    }
    let text = serde_json::to_string(&v).unwrap_or_default();
    // `["`, `"]` and the marker's text around the prefix.
    let overhead = 30 + n.to_string().len();
    let kept = json_prefix(&text, limit.saturating_sub(overhead));
    vec![format!("{kept}...[truncated: {n} bytes]")]
}

/// Every detail field within `limit` bytes of JSON (the audit body limit), each over it replaced
/// by its marker in a shape of its kind. The gate's bodies are bounded as they are read; this
/// bounds what handlers and the gateway put in the rest, and is harmless on what is already
/// within bounds.
pub fn bound_detail(d: &mut AuditDetail, limit: usize) {
    for v in [
        &mut d.request_body,
        &mut d.response_body,
        &mut d.input_content,
        &mut d.output_content,
    ] {
        if let Some(x) = v.take() {
            *v = Some(bounded_value(x, limit));
        }
    }
    for v in [&mut d.rag_results, &mut d.memory_results] {
        if let Some(x) = v.take() {
            *v = Some(bounded_values(x, limit));
        }
    }
    for v in [&mut d.rag_query, &mut d.memory_query] {
        if let Some(x) = v.take() {
            *v = Some(bounded_strings(x, limit));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_kept_whole_or_cut_at_a_character_with_its_length() {
        assert_eq!(truncate_text("abc", 3), "abc");
        assert_eq!(truncate_text("abcd", 3), "abc...[truncated: 4 bytes]");
        // 'é' is two bytes: the cut never splits it.
        assert_eq!(truncate_text("aé", 2), "a...[truncated: 3 bytes]");
    }

    #[test]
    fn long_messages_keep_their_head_and_tail() {
        let short = "x".repeat(MESSAGE_MAX);
        assert_eq!(clip_message(&short), short);
        let long = format!("head {} tail", "é".repeat(1000));
        let clipped = clip_message(&long);
        assert!(clipped.starts_with("head "), "{clipped}");
        assert!(clipped.ends_with(" tail"), "{clipped}");
        assert!(
            clipped.len() <= MESSAGE_HEAD + MESSAGE_TAIL + 30,
            "{}",
            clipped.len()
        );
        let cut =
            long.len() - prefix(&long, MESSAGE_HEAD).len() - suffix(&long, MESSAGE_TAIL).len();
        assert!(
            clipped.contains(&format!("...[{cut} bytes cut]...")),
            "{clipped}"
        );
    }

    #[test]
    fn markers_stay_within_the_limit_whatever_the_text_escapes_to() {
        for text in [
            "a".repeat(10_000),
            "\u{1}".repeat(10_000),
            "\"".repeat(10_000),
            "é".repeat(10_000),
        ] {
            let v = bounded_value(json!({ "t": text }), 1000);
            assert_eq!(v["_truncated"], json!(true));
            assert_eq!(v["_original_bytes"], json!(json_len(&json!({ "t": text }))));
            let n = json_len(&v);
            assert!((900..=1000).contains(&n), "{n}");
            let p = v["_prefix"].as_str().expect("prefix");
            assert!(serde_json::to_string(&json!({ "t": text }))
                .expect("json")
                .starts_with(p));
        }
        let small = json!({"a": 1});
        assert_eq!(bounded_value(small.clone(), 1000), small);
    }

    #[test]
    fn every_detail_field_is_bounded_in_a_shape_of_its_kind() {
        let big = "z".repeat(5000);
        let mut d = AuditDetail {
            request_body: Some(json!({ "b": big })),
            input_content: Some(json!([big])),
            output_content: Some(json!(big)),
            rag_query: Some(vec![big.clone(), "q".into()]),
            rag_results: Some(vec![json!({"content": big, "similarity": 1, "source": {}})]),
            memory_query: Some(vec!["small".into()]),
            memory_results: Some(vec![json!({ "c": big })]),
            ..Default::default()
        };
        bound_detail(&mut d, 1000);
        for v in [&d.request_body, &d.input_content, &d.output_content] {
            let v = v.as_ref().expect("kept");
            assert_eq!(v["_truncated"], json!(true), "{v}");
            assert!(json_len(v) <= 1000);
        }
        for v in [&d.rag_results, &d.memory_results] {
            let v = v.as_ref().expect("kept");
            assert_eq!(v.len(), 1);
            assert_eq!(v[0]["_truncated"], json!(true));
            assert!(json_len(v) <= 1000);
        }
        let q = d.rag_query.as_ref().expect("kept");
        assert_eq!(q.len(), 1);
        assert!(q[0].starts_with("[\"zzz"), "{}", q[0]);
        let n = json_len(&vec![big.clone(), "q".into()]);
        assert!(
            q[0].ends_with(&format!("...[truncated: {n} bytes]")),
            "{}",
            q[0]
        );
        assert!(json_len(q) <= 1000);
        assert_eq!(d.memory_query, Some(vec!["small".to_string()]));
    }
}
