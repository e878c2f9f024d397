//! What an erasure must leave, shared by the erasure tests of one node and of a cluster: two
//! people of one tenant with distinctive secrets in every place a request can put one (a
//! memory's content and metadata, searches in every mode, an extraction, the
//! `X-Audit-Metadata` header, an export), the reads that must show one of them erased and the
//! other exactly as before, and a byte scan of files that shows it can find what it looks for.
//!
//! Requests go through a [`Client`] over one or more nodes: each carries
//! `X-Auditmem-Min-Position` at the last position the client saw, so a read on any node sees
//! every write made through another.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use reqwest::Method;
use serde_json::{json, Value};

use crate::cluster::harness::{admin, request_with, Reply, MIN_POSITION};
use crate::common::{self, Server};

/// Someone whose data an erasure forgets (or keeps), and where their secrets go.
pub struct Person {
    pub id: &'static str,
    /// In a memory's content, the searches, the extraction's input.
    pub ssn: &'static str,
    /// A word nothing else holds: in a memory's content, the searches, the extraction (and so
    /// in the memory it extracts).
    pub word: &'static str,
    /// In memories' metadata.
    pub passport: &'static str,
    /// In the `X-Audit-Metadata` header of each of the person's requests.
    pub ticket: &'static str,
    /// A distinctive substring of each secret: a copy cut around the whole is still found.
    pub cores: [&'static str; 4],
}

pub const ALICE: Person = Person {
    id: "alice",
    ssn: "078-05-1120",
    word: "zanzibarquokka",
    passport: "QX-PASSPORT-55192",
    ticket: "TCK-ALICE-88213",
    cores: ["05-1120", "barquok", "PORT-551", "CE-8821"],
};

pub const BOB: Person = Person {
    id: "bob",
    ssn: "219-09-9999",
    word: "pangolinbrioche",
    passport: "QX-PASSPORT-71346",
    ticket: "TCK-BOB-40517",
    cores: ["09-9999", "linbrio", "PORT-713", "OB-4051"],
};

impl Person {
    /// Every secret and every core.
    pub fn needles(&self) -> Vec<&'static str> {
        let mut all = vec![self.ssn, self.word, self.passport, self.ticket];
        all.extend(self.cores);
        all
    }

    /// The needles `text` holds.
    pub fn found_in(&self, text: &str) -> Vec<&'static str> {
        self.needles()
            .into_iter()
            .filter(|n| text.contains(n))
            .collect()
    }

    fn tag(&self) -> String {
        json!({ "ticket": self.ticket }).to_string()
    }
}

/// The permissions of the erasure tests' keys.
pub const ALL: [&str; 5] = [
    "audit.read",
    "audit.export",
    "memory.read",
    "memory.write",
    "memory.erase",
];

/// A business tenant (exports, hashes) and a key with [`ALL`], made on `s`: (tenant, key, the
/// position at which the key was committed).
pub fn tenant_with_erase(s: &Server) -> (String, String, u64) {
    let r = admin(
        s,
        Method::POST,
        "/admin/v1/tenants",
        Some(&json!({"name": "t-erasure", "plan": "business", "credits": 1000})),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let tenant = r.body["data"]["id"].as_str().expect("id").to_string();
    let r = admin(
        s,
        Method::POST,
        &format!("/admin/v1/tenants/{tenant}/keys"),
        Some(&json!({ "permissions": ALL })),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let key = r.body["data"]["api_key"].as_str().expect("key").to_string();
    (tenant, key, r.pos())
}

/// One tenant's key over some nodes, remembering the furthest position any answer named.
pub struct Client<'a> {
    pub nodes: Vec<&'a Server>,
    pub key: String,
    pub at: u64,
}

impl Client<'_> {
    /// A request to node `i` that waits for [`Client::at`]; `at` follows its answer.
    pub fn call(
        &mut self,
        i: usize,
        method: Method,
        path: &str,
        body: Option<Value>,
        headers: &[(&str, &str)],
    ) -> Reply {
        let node = self.nodes[i % self.nodes.len()];
        let at = self.at.to_string();
        let mut all = vec![(MIN_POSITION, at.as_str())];
        all.extend_from_slice(headers);
        let r = request_with(node, method, path, &self.key, body.as_ref(), &all);
        if let Some(p) = r.position.as_deref().and_then(|p| p.parse().ok()) {
            self.at = self.at.max(p);
        }
        r
    }

    /// A GET to node `i` ([`Client::call`]).
    pub fn get(&mut self, i: usize, path: &str) -> Reply {
        self.call(i, Method::GET, path, None, &[])
    }

    /// A call of `p`'s, tagged with `p`'s ticket, that must answer 200: its `data`.
    fn ok(
        &mut self,
        i: usize,
        method: Method,
        path: &str,
        body: Option<Value>,
        p: &Person,
    ) -> Value {
        let tag = p.tag();
        let r = self.call(i, method, path, body, &[("x-audit-metadata", &tag)]);
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        r.body["data"].clone()
    }
}

/// What [`plant`] wrote.
pub struct Planted {
    /// Each person's memories (by person id): memory id and content, in the order made.
    pub memories: BTreeMap<&'static str, Vec<(String, String)>>,
    /// An export of the tenant's log made after everything else, completed on every node.
    pub export_id: String,
}

impl Planted {
    /// The ids of `p`'s memories.
    pub fn ids(&self, p: &Person) -> BTreeSet<String> {
        self.memories[p.id]
            .iter()
            .map(|(id, _)| id.clone())
            .collect()
    }
}

/// The secrets of `people` in every kind of request, each through the next node in turn:
/// per person a memory holding the ssn, one (batch-created) holding the word, both with the
/// passport in their metadata, a search in each mode and an extraction holding both, a history
/// read, all tagged with the person's ticket in `X-Audit-Metadata`; then an export of the
/// tenant's log, completed on every node.
pub fn plant(c: &mut Client<'_>, people: &[&Person]) -> Planted {
    let mut turn = 0;
    let mut next = || {
        turn += 1;
        turn - 1
    };
    let mut memories = BTreeMap::new();
    for p in people {
        let mut mine = Vec::new();
        let content = format!("The user's social security number is {}", p.ssn);
        let m = c.ok(
            next(),
            Method::POST,
            "/v1/memories",
            Some(json!({"content": content, "memory_type": "fact", "user_id": p.id, "metadata": {"passport": p.passport}})),
            p,
        );
        mine.push((m["id"].as_str().expect("id").to_string(), content));
        let content = format!("The user collects {} figurines", p.word);
        let m = c.ok(
            next(),
            Method::POST,
            "/v1/memories/batch",
            Some(json!({"memories": [{"content": content, "memory_type": "fact", "user_id": p.id, "metadata": {"passport": p.passport}}]})),
            p,
        );
        mine.push((
            m["memories"][0]["id"].as_str().expect("id").to_string(),
            content,
        ));
        for mode in ["semantic", "keyword", "hybrid"] {
            let found = c.ok(
                next(),
                Method::POST,
                "/v1/memories/search",
                Some(json!({"query": format!("what is the number {} of the {} collector?", p.ssn, p.word), "search_mode": mode, "filters": {"user_id": p.id}})),
                p,
            );
            assert!(
                !found["results"].as_array().expect("results").is_empty(),
                "{mode}: {found}"
            );
        }
        let text = format!(
            "My social security number is {}. I love {} stew.",
            p.ssn, p.word
        );
        let extracted = c.ok(
            next(),
            Method::POST,
            "/v1/memories/extract",
            Some(json!({"text": text, "user_id": p.id, "deduplicate": true})),
            p,
        );
        let made = extracted["memories"].as_array().expect("memories");
        assert!(
            made.iter()
                .any(|m| m["content"].as_str().is_some_and(|t| t.contains(p.word))),
            "nothing extracted holds the word: {extracted}"
        );
        for m in made {
            mine.push((
                m["id"].as_str().expect("id").to_string(),
                m["content"].as_str().expect("content").to_string(),
            ));
        }
        let first = mine[0].0.clone();
        c.ok(
            next(),
            Method::GET,
            &format!("/v1/memories/{first}/history"),
            None,
            p,
        );
        memories.insert(p.id, mine);
    }
    let r = c.call(
        next(),
        Method::POST,
        "/v1/audit/logs/export",
        Some(json!({"format": "json"})),
        &[],
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let export_id = r.body["data"]["export_id"]
        .as_str()
        .expect("export_id")
        .to_string();
    for i in 0..c.nodes.len() {
        let r = c.get(i, &format!("/v1/audit/logs/export/{export_id}"));
        assert_eq!(r.status, 200, "{}", r.body);
        c.nodes[i].wait_export_status(&c.key, &export_id, "completed");
    }
    Planted {
        memories,
        export_id,
    }
}

/// The personal fields of an audit list item.
const ITEM_PERSONAL: [&str; 4] = ["ip_address", "user_agent", "error_msg", "metadata"];

/// `item` as it lists once erased: its personal fields `null`, `"erased": true`.
fn erased_item(item: &Value) -> Value {
    let mut e = item.clone();
    let o = e.as_object_mut().expect("an object");
    for f in ITEM_PERSONAL {
        o.insert(f.to_string(), Value::Null);
    }
    o.insert("erased".into(), json!(true));
    e
}

/// The detail read `detail` of `item` as it reads once erased: the item's personal fields
/// and every field of the detail's own (request and response, input and output, memory and
/// RAG fields) `null`, `"erased": true`, no `detail_salt`.
fn erased_detail(item: &Value, detail: &Value) -> Value {
    let mut e = detail.clone();
    let o = e.as_object_mut().expect("an object");
    o.remove("detail_salt");
    for (k, v) in o.iter_mut() {
        if ITEM_PERSONAL.contains(&k.as_str()) || item.get(k).is_none() {
            *v = Value::Null;
        }
    }
    o.insert("erased".into(), json!(true));
    e
}

/// An erasure's test: what was written, what a node read before, whose data is erased and
/// whose kept.
#[derive(Clone, Copy)]
pub struct Case<'a> {
    pub planted: &'a Planted,
    pub before: &'a Before,
    pub gone: &'a Person,
    pub kept: &'a Person,
}

/// Reads of node `i` that an erasure must change only as documented, taken before it.
pub struct Before {
    /// Every audit entry of the tenant: its list item and its detail, by id.
    pub entries: BTreeMap<String, (Value, Value)>,
    /// The entries holding a secret of the person (by person id).
    pub holding: BTreeMap<&'static str, BTreeSet<String>>,
    /// Each memory's history (by memory id).
    pub histories: BTreeMap<String, Value>,
    /// The export's rows, by entry id.
    pub rows: BTreeMap<String, Value>,
}

/// Every audit entry of the key's tenant on node `i`, and each one's detail.
fn entries_of(c: &mut Client<'_>, i: usize) -> BTreeMap<String, (Value, Value)> {
    // Waits for `at`, so that the unconditioned reads below see it too.
    let r = c.get(i, "/v1/audit/logs?page_size=1");
    assert_eq!(r.status, 200, "{}", r.body);
    let node = c.nodes[i % c.nodes.len()];
    let mut out = BTreeMap::new();
    for item in common::all_audit_entries(node, &c.key) {
        let id = item["id"].as_str().expect("id").to_string();
        let (status, d) = node.get(&format!("/v1/audit/logs/{id}"), &c.key);
        assert_eq!(status, 200, "{d}");
        out.insert(id, (item, d["data"].clone()));
    }
    out
}

fn rows_of(node: &Server, key: &str, export_id: &str) -> (Vec<u8>, BTreeMap<String, Value>) {
    let (status, _, _, bytes) = node.download_cluster_export(key, export_id);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
    let rows: Vec<Value> = serde_json::from_slice(&bytes).expect("the export's JSON");
    let rows = rows
        .into_iter()
        .map(|r| (r["id"].as_str().expect("id").to_string(), r))
        .collect();
    (bytes, rows)
}

/// Node `i`'s reads of everything [`plant`] wrote, before an erasure. Each person's entries
/// are their 7 tagged requests and the reads of their memories' histories made here, and
/// those hold their secrets; no other entry does.
pub fn before(c: &mut Client<'_>, i: usize, planted: &Planted, people: &[&Person]) -> Before {
    let mut histories = BTreeMap::new();
    for id in planted.memories.values().flatten().map(|(id, _)| id) {
        let r = c.get(i, &format!("/v1/memories/{id}/history"));
        assert_eq!(r.status, 200, "{}", r.body);
        histories.insert(id.clone(), r.body["data"].clone());
    }
    let entries = entries_of(c, i);
    let mut holding = BTreeMap::new();
    for p in people {
        let tagged: BTreeSet<String> = entries
            .iter()
            .filter(|(_, (item, _))| item["metadata"] == json!({ "ticket": p.ticket }))
            .map(|(id, _)| id.clone())
            .collect();
        assert_eq!(tagged.len(), 7, "{}'s tagged entries: {tagged:?}", p.id);
        let holds: BTreeSet<String> = entries
            .iter()
            .filter(|(_, (item, d))| {
                !p.found_in(&item.to_string()).is_empty() || !p.found_in(&d.to_string()).is_empty()
            })
            .map(|(id, _)| id.clone())
            .collect();
        let reads: BTreeSet<String> = holds.difference(&tagged).cloned().collect();
        assert_eq!(
            holds.len(),
            7 + planted.memories[p.id].len(),
            "{}'s entries",
            p.id
        );
        assert!(tagged.is_subset(&holds), "{}'s entries", p.id);
        for id in &reads {
            assert_eq!(entries[id].0["action"], json!("memory.history"), "{id}");
        }
        holding.insert(p.id, holds);
    }
    let node = c.nodes[i % c.nodes.len()];
    let (bytes, rows) = rows_of(node, &c.key, &planted.export_id);
    let text = String::from_utf8_lossy(&bytes);
    for p in people {
        // A row holds an entry's list fields: the tag, not the bodies.
        let tagged = rows
            .values()
            .filter(|r| r["metadata"] == json!({ "ticket": p.ticket }))
            .count();
        assert_eq!(tagged, 7, "{}: {text}", p.id);
    }
    Before {
        entries,
        holding,
        histories,
        rows,
    }
}

/// The `id` of each object of an array.
pub fn ids_of(results: &Value) -> BTreeSet<String> {
    results
        .as_array()
        .expect("an array")
        .iter()
        .map(|m| m["id"].as_str().expect("id").to_string())
        .collect()
}

/// Node `i` after `gone`'s erasure: every read of `gone`'s memories and entries shows them
/// erased and none of their secrets anywhere; `kept`'s read exactly as `before`.
pub fn check_forgotten(c: &mut Client<'_>, i: usize, case: &Case<'_>) {
    let Case {
        planted,
        before,
        gone,
        kept,
    } = *case;
    let no_secret = |what: &str, text: &str| {
        let found = gone.found_in(text);
        assert!(found.is_empty(), "node {i}: {what} holds {found:?}: {text}");
    };

    // Memories: gone's are 404, gone from lists and every search mode, and their histories
    // say erased; kept's are as written.
    let gone_ids = planted.ids(gone);
    let kept_ids = planted.ids(kept);
    for id in &gone_ids {
        let r = c.get(i, &format!("/v1/memories/{id}"));
        common::assert_error(&r.pair(), 404, 4040);
        let r = c.get(i, &format!("/v1/memories/{id}/history"));
        assert_eq!(r.status, 200, "{}", r.body);
        no_secret("a history", &r.body.to_string());
        let h = &r.body["data"];
        assert_eq!(h["erased"], json!(true), "{h}");
        let versions = h["versions"].as_array().expect("versions");
        let was = before.histories[id]["versions"]
            .as_array()
            .expect("versions");
        assert_eq!(versions.len(), was.len() + 1, "{h}");
        assert_eq!(
            versions.last().map(|v| &v["change"]),
            Some(&json!("erased"))
        );
        for v in versions {
            assert_eq!(v["erased"], json!(true), "{h}");
            for f in ["content", "metadata"] {
                assert!(v.get(f).is_none_or(Value::is_null), "{f}: {h}");
            }
        }
    }
    for (id, content) in &planted.memories[kept.id] {
        let r = c.get(i, &format!("/v1/memories/{id}"));
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.body["data"]["content"], json!(content), "{}", r.body);
        let r = c.get(i, &format!("/v1/memories/{id}/history"));
        assert_eq!(
            r.body["data"], before.histories[id],
            "node {i}: {id}'s history"
        );
    }
    let r = c.get(i, "/v1/memories?page_size=100");
    no_secret("the memory list", &r.body.to_string());
    assert_eq!(ids_of(&r.body["data"]["memories"]), kept_ids, "{}", r.body);
    let r = c.get(i, &format!("/v1/memories?user_id={}", gone.id));
    assert_eq!(r.body["data"]["total"], json!(0), "{}", r.body);
    let kept_word: BTreeSet<String> = planted.memories[kept.id]
        .iter()
        .filter(|(_, text)| text.contains(kept.word))
        .map(|(id, _)| id.clone())
        .collect();
    for mode in ["semantic", "keyword", "hybrid"] {
        let r = c.call(
            i,
            Method::POST,
            "/v1/memories/search",
            Some(json!({"query": kept.word, "search_mode": mode, "filters": {"user_id": kept.id}})),
            &[],
        );
        assert_eq!(r.status, 200, "{}", r.body);
        let found = ids_of(&r.body["data"]["results"]);
        let first = r.body["data"]["results"][0]["id"].as_str().unwrap_or("");
        assert!(kept_word.contains(first), "{mode}: {}", r.body);
        if mode == "keyword" {
            assert_eq!(found, kept_word, "{}", r.body);
        }
    }

    // Audit entries: gone's read erased (their clear fields, hashes and chain unchanged),
    // kept's exactly as before, every other one lists as before, and no entry of the tenant,
    // reads of reads included, shows a secret of gone's.
    let after = entries_of(c, i);
    for (id, (item, detail)) in &before.entries {
        let (now_item, now_detail) = after.get(id).expect("an entry is missing");
        if before.holding[gone.id].contains(id) {
            assert_eq!(now_item, &erased_item(item), "node {i}: {id}");
            assert_eq!(now_detail, &erased_detail(item, detail), "node {i}: {id}");
        } else if before.holding[kept.id].contains(id) {
            assert_eq!((now_item, now_detail), (item, detail), "node {i}: {id}");
        } else {
            assert_eq!(now_item, item, "node {i}: {id}");
        }
    }
    for (id, (item, detail)) in &after {
        no_secret(&format!("entry {id}"), &item.to_string());
        no_secret(&format!("entry {id}'s detail"), &detail.to_string());
    }

    // The export made before downloads gone's rows erased and kept's as they were.
    let node = c.nodes[i % c.nodes.len()];
    let (bytes, rows) = rows_of(node, &c.key, &planted.export_id);
    no_secret("the export", &String::from_utf8_lossy(&bytes));
    assert_eq!(rows.len(), before.rows.len());
    for (id, row) in &rows {
        if before.holding[gone.id].contains(id) {
            assert_eq!(row["erased"], json!(true), "{row}");
        } else if before.holding[kept.id].contains(id) {
            assert_eq!(row, &before.rows[id], "node {i}: row {id}");
        }
    }

    let metrics = common::metrics_text(node);
    assert!(
        metrics.contains("auditmem_http_requests_total"),
        "{metrics}"
    );
    no_secret("/metrics", &metrics);
}

/// Node `i` after `gone`'s erasure: a search (every mode) for `gone`'s secrets finds none of
/// `gone`'s memories. Such a search is a new request holding them, recorded (sealed under
/// the tenant) like any other: so it comes after every [`check_forgotten`], which looks for
/// them in every audit entry.
pub fn check_unfindable(c: &mut Client<'_>, i: usize, case: &Case<'_>) {
    let Case {
        planted,
        gone,
        kept,
        ..
    } = *case;
    let query = format!("{} {}", gone.ssn, gone.word);
    for mode in ["semantic", "keyword", "hybrid"] {
        let r = c.call(
            i,
            Method::POST,
            "/v1/memories/search",
            Some(
                json!({"query": query, "search_mode": mode, "top_k": 100, "min_similarity": -1.0}),
            ),
            &[],
        );
        assert_eq!(r.status, 200, "{}", r.body);
        let found = gone.found_in(&r.body.to_string());
        assert!(
            found.is_empty(),
            "node {i}, {mode}: {found:?} in {}",
            r.body
        );
        // Only gone's memories held these terms: a keyword search finds nothing, the others
        // every memory left, which are kept's.
        let want = match mode {
            "keyword" => BTreeSet::new(),
            _ => planted.ids(kept),
        };
        assert_eq!(
            ids_of(&r.body["data"]["results"]),
            want,
            "{mode}: {}",
            r.body
        );
    }
}

/// Erases `gone` (a user) through node `i` once [`before`] is taken, checks the receipt
/// against the log, then every node with [`check_forgotten`] and after that
/// [`check_unfindable`]; gives the receipt.
pub fn erase_and_check(c: &mut Client<'_>, i: usize, case: &Case<'_>) -> Value {
    let Case {
        planted,
        before,
        gone,
        ..
    } = *case;
    let r = c.call(
        i,
        Method::POST,
        "/v1/erasures",
        Some(json!({ "user_id": gone.id })),
        &[],
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let data = &r.body["data"];
    let seq = data["seq"].as_u64().expect("seq");
    assert_eq!(seq, r.pos() - 1, "{}", r.body);
    let ids = planted.ids(gone);
    assert_eq!(
        data["erased"],
        json!({"memories": ids.len(), "keys": 1, "audit_entries": before.holding[gone.id].len(), "exports": 1}),
        "{}",
        r.body
    );
    assert_eq!(data["predate_encryption"], json!(0), "{}", r.body);
    let event = erasure_event(c.nodes[i % c.nodes.len()], seq);
    let named: BTreeSet<String> = event.memory_ids.iter().map(ToString::to_string).collect();
    assert_eq!(named, ids);
    assert_eq!(event.key_ids.len(), 1);
    for n in 0..c.nodes.len() {
        check_forgotten(c, n, case);
    }
    for n in 0..c.nodes.len() {
        check_unfindable(c, n, case);
    }
    r.body
}

/// The byte scan of a stopped node's files ([`assert_forgotten_in`]): its data dir with its
/// signing key and checkpoints, and its export files on their own; `kept`'s secrets are in no
/// file either (sealed). Says what it read.
pub fn assert_node_forgets(node: &Server, gone: &Person, kept: &Person) -> String {
    let root = node.data_dir.parent().expect("the node's dir");
    let all = assert_forgotten_in(root, gone, "memory.search");
    let exports = assert_forgotten_in(&node.data_dir.join("exports"), gone, "memory.search");
    assert_eq!(scan(root, &kept.needles()).found, Vec::new());
    format!(
        "{} files, {} bytes ({} files, {} bytes of exports)",
        all.files, all.bytes, exports.files, exports.bytes
    )
}

/// The records of `s`'s log from `seq` to its head, from the admin log stream.
pub fn records_from(s: &Server, seq: u64) -> Vec<(u64, Vec<u8>)> {
    use base64::Engine;
    let text = s
        .raw()
        .get(format!("{}/admin/v1/log?from={seq}", s.url))
        .bearer_auth(common::ADMIN_TOKEN)
        .send()
        .expect("send")
        .text()
        .expect("text");
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let line: Value = serde_json::from_str(l).expect("json");
            let record = base64::engine::general_purpose::STANDARD
                .decode(line["record"].as_str().expect("record"))
                .expect("base64");
            (line["seq"].as_u64().expect("seq"), record)
        })
        .collect()
}

fn event_of(record: &[u8]) -> auditmem_projections::Event {
    let r = auditmem::log::record::RecordRef::decode(record).expect("record");
    auditmem_projections::Event::decode(r.event).expect("event")
}

/// The erasure event at `seq`.
pub fn erasure_event(s: &Server, seq: u64) -> auditmem_projections::event::SubjectsErased {
    let records = records_from(s, seq);
    let (found, record) = records.first().expect("a record");
    assert_eq!(*found, seq);
    match event_of(record) {
        auditmem_projections::Event::SubjectsErased(e) => e,
        other => panic!("record {seq} holds {}", other.kind()),
    }
}

/// Every erasure event of `s`'s log from `seq` on.
pub fn erasures_from(s: &Server, seq: u64) -> Vec<auditmem_projections::event::SubjectsErased> {
    records_from(s, seq)
        .iter()
        .filter_map(|(_, r)| match event_of(r) {
            auditmem_projections::Event::SubjectsErased(e) => Some(e),
            _ => None,
        })
        .collect()
}

/// What a byte scan of a directory read and found.
#[derive(Debug, Default)]
pub struct Scan {
    pub files: usize,
    pub bytes: u64,
    /// Each file holding a needle, with the needle.
    pub found: Vec<(PathBuf, String)>,
}

impl Scan {
    /// The needles found, each once.
    pub fn needles(&self) -> BTreeSet<&str> {
        self.found.iter().map(|(_, n)| n.as_str()).collect()
    }
}

/// Reads every file under `dir` (a file removed meanwhile is skipped) and finds `needles`.
pub fn scan(dir: &Path, needles: &[&str]) -> Scan {
    let mut out = Scan::default();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(path);
                continue;
            }
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            out.files += 1;
            out.bytes += bytes.len() as u64;
            for n in needles {
                if bytes.windows(n.len()).any(|w| w == n.as_bytes()) {
                    out.found.push((path.clone(), n.to_string()));
                }
            }
        }
    }
    out
}

/// Scans `dir` for `gone`'s needles and for `witness`, a string known to be stored there in
/// the clear: asserts the scan read bytes and found the witness (so that it could have found
/// a secret) and found no needle.
pub fn assert_forgotten_in(dir: &Path, gone: &Person, witness: &str) -> Scan {
    let mut needles = gone.needles();
    needles.push(witness);
    let s = scan(dir, &needles);
    assert!(s.bytes > 0, "{}: nothing to scan", dir.display());
    assert!(
        s.needles().contains(witness),
        "{}: {witness:?} is in no file ({} files, {} bytes): the scan cannot find",
        dir.display(),
        s.files,
        s.bytes
    );
    let secrets: Vec<&(PathBuf, String)> = s.found.iter().filter(|(_, n)| n != witness).collect();
    assert!(secrets.is_empty(), "{}: {secrets:?}", dir.display());
    s
}
