//! Memory reads `as_of` a log position (docs/API.md, "Reading the past") on the real binary:
//! a search as of a recorded `memory.search` gives back the recorded ids in the recorded order
//! after the store changed; get, list, query and history show the store as it stood; bad
//! values are refused naming `as_of`; an erased user's memories are absent from the past too;
//! a tenant never reads another tenant's past. A store replayed as of a position is kept for
//! the tenant's next read as of it: that read answers the same, an erasure since makes it fold
//! again, and another tenant never gets it.

use crate::common::{assert_error, metrics_text, Server};
use crate::forget;

use reqwest::Method;
use serde_json::{json, Value};

/// A call's status, body and `X-Auditmem-Position`.
fn call(
    s: &Server,
    method: Method,
    path: &str,
    key: &str,
    body: Option<Value>,
) -> (u16, Value, u64) {
    let mut req = s
        .raw()
        .request(method, format!("{}{}", s.url, path))
        .bearer_auth(key);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().expect("request");
    let position = resp
        .headers()
        .get("x-auditmem-position")
        .map(|v| v.to_str().expect("ascii").parse().expect("a number"))
        .unwrap_or(0);
    let status = resp.status().as_u16();
    (status, resp.json().expect("JSON"), position)
}

fn remember(s: &Server, key: &str, body: Value) -> (String, u64) {
    let (status, v, at) = call(s, Method::POST, "/v1/memories", key, Some(body));
    assert_eq!(status, 200, "{v}");
    (v["data"]["id"].as_str().expect("id").to_string(), at)
}

fn ids(list: &Value) -> Vec<String> {
    list.as_array()
        .expect("a list")
        .iter()
        .map(|m| m["id"].as_str().expect("id").to_string())
        .collect()
}

fn tenant(s: &Server) -> String {
    let (_, key, _) = forget::tenant_with_erase(s);
    key
}

#[test]
fn a_search_as_of_its_recorded_position_answers_the_recorded_ids_in_order() {
    let s = Server::start();
    let key = tenant(&s);
    let (hiking, _) = remember(
        &s,
        &key,
        json!({"content": "The user loves hiking in the Alps every summer", "memory_type": "fact"}),
    );
    let (cats, _) = remember(
        &s,
        &key,
        json!({"content": "The user has two cats named Miso and Tofu", "memory_type": "fact"}),
    );
    let (mountains, _) = remember(
        &s,
        &key,
        json!({"content": "The user climbed Mont Blanc in 2019", "memory_type": "fact", "importance": 0.9}),
    );
    let (_, _) = remember(
        &s,
        &key,
        json!({"content": "The user prefers tea over coffee", "memory_type": "rule"}),
    );
    let asked = json!({"query": "mountain hiking trips", "top_k": 3});
    let (status, then, position) = call(
        &s,
        Method::POST,
        "/v1/memories/search",
        &key,
        Some(asked.clone()),
    );
    assert_eq!(status, 200, "{then}");
    let answered = ids(&then["data"]["results"]);
    assert_eq!(answered.len(), 3, "{then}");
    assert!(
        answered.contains(&mountains) && answered.contains(&hiking),
        "{then}"
    );

    // The recorded entry: its results, and its record's position.
    let (_, list) = s.get("/v1/audit/logs?action=memory.search&page_size=1", &key);
    let entry = list["data"]["logs"][0]["id"]
        .as_str()
        .expect("id")
        .to_string();
    let (_, detail) = s.get(&format!("/v1/audit/logs/{entry}"), &key);
    let recorded = ids(&detail["data"]["memory_results"]);
    assert_eq!(recorded, answered);
    let (_, proof) = s.get(&format!("/v1/audit/logs/{entry}/proof"), &key);
    assert_eq!(proof["data"]["seq"], json!(position));

    // The store changes: the best hit is rewritten, the second deleted, a better one added.
    let (status, v, patched) = call(
        &s,
        Method::PATCH,
        &format!("/v1/memories/{mountains}"),
        &key,
        Some(json!({"content": "The user collects stamps"})),
    );
    assert_eq!(status, 200, "{v}");
    let (status, v, _) = call(
        &s,
        Method::DELETE,
        &format!("/v1/memories/{hiking}"),
        &key,
        None,
    );
    assert_eq!(status, 200, "{v}");
    let (newer, _) = remember(
        &s,
        &key,
        json!({"content": "Mountain hiking trips are the user's favourite holidays", "memory_type": "fact"}),
    );
    let (_, now, _) = call(
        &s,
        Method::POST,
        "/v1/memories/search",
        &key,
        Some(asked.clone()),
    );
    let answered_now = ids(&now["data"]["results"]);
    assert!(answered_now.contains(&newer), "{now}");
    assert!(!answered_now.contains(&hiking), "{now}");
    assert_ne!(answered_now, recorded);
    assert!(now["data"].get("as_of").is_none(), "{now}");

    let mut replay = asked.clone();
    replay["as_of"] = json!(position);
    let (status, past, _) = call(&s, Method::POST, "/v1/memories/search", &key, Some(replay));
    assert_eq!(status, 200, "{past}");
    assert_eq!(ids(&past["data"]["results"]), recorded);
    let then_mountains = past["data"]["results"]
        .as_array()
        .expect("results")
        .iter()
        .find(|r| r["id"] == json!(mountains))
        .expect("the rewritten memory as it was");
    assert_eq!(
        then_mountains["content"],
        json!("The user climbed Mont Blanc in 2019")
    );
    let shown = &past["data"]["as_of"];
    assert_eq!(shown["position"], json!(position));
    assert_eq!(shown["events_replayed"], json!(4));
    assert_eq!(shown["embedder_changed"], json!(false));
    let model = shown["query_model"].as_str().expect("a model").to_string();
    assert_eq!(shown["memory_models"], json!([model]));

    // The same, asked by a time: the record's, shown in milliseconds, plus one millisecond
    // (the calls between the search and the update took longer than that).
    let at = shown["at"].as_str().expect("a time");
    let at = chrono::DateTime::parse_from_rfc3339(at).expect("RFC 3339")
        + chrono::Duration::milliseconds(1);
    let mut by_time = asked.clone();
    by_time["as_of"] = json!(at.to_rfc3339());
    let (status, past, _) = call(&s, Method::POST, "/v1/memories/search", &key, Some(by_time));
    assert_eq!(status, 200, "{past}");
    let resolved = past["data"]["as_of"]["position"]
        .as_u64()
        .expect("position");
    assert!((position..patched).contains(&resolved), "{resolved}");
    assert_eq!(ids(&past["data"]["results"]), recorded);
    assert!(!recorded.contains(&cats), "{then}");
}

#[test]
fn get_list_query_and_history_as_of_show_the_store_as_it_stood() {
    let s = Server::start();
    let key = tenant(&s);
    let (a, created) = remember(
        &s,
        &key,
        json!({"content": "first words", "memory_type": "fact", "importance": 0.3}),
    );
    let (status, v, updated) = call(
        &s,
        Method::PATCH,
        &format!("/v1/memories/{a}"),
        &key,
        Some(json!({"content": "second words"})),
    );
    assert_eq!(status, 200, "{v}");
    let (b, both) = remember(
        &s,
        &key,
        json!({"content": "a context", "memory_type": "context"}),
    );
    let (status, v, deleted) = call(&s, Method::DELETE, &format!("/v1/memories/{a}"), &key, None);
    assert_eq!(status, 200, "{v}");

    let get = |id: &str, at: u64| s.get(&format!("/v1/memories/{id}?as_of={at}"), &key);
    let (status, v) = get(&a, created);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["data"]["content"], json!("first words"));
    assert_eq!(v["data"]["importance"], json!(0.3));
    assert_eq!(v["data"]["as_of"]["position"], json!(created));
    assert_eq!(v["data"]["as_of"]["events_replayed"], json!(1));
    assert_eq!(get(&a, updated).1["data"]["content"], json!("second words"));
    assert_eq!(get(&a, both).1["data"]["content"], json!("second words"));
    assert_error(&get(&a, deleted), 404, 4040);
    assert_error(&s.get(&format!("/v1/memories/{a}"), &key), 404, 4040);
    assert_error(&get(&b, updated), 404, 4040);

    let (status, page) = s.get(&format!("/v1/memories?as_of={both}"), &key);
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["data"]["total"], json!(2));
    assert_eq!(ids(&page["data"]["memories"]), vec![b.clone(), a.clone()]);
    assert_eq!(
        page["data"]["memories"][1]["content"],
        json!("second words")
    );
    assert_eq!(page["data"]["as_of"]["events_replayed"], json!(3));
    let (_, page) = s.get(
        &format!("/v1/memories?as_of={created}&memory_type=fact"),
        &key,
    );
    assert_eq!(page["data"]["total"], json!(1));
    assert_eq!(page["data"]["memories"][0]["content"], json!("first words"));
    let (_, page) = s.get("/v1/memories?as_of=0", &key);
    assert_eq!(
        page["data"],
        json!({"memories": [], "total": 0, "page": 1, "page_size": 20,
               "as_of": {"position": 0, "at": null, "events_replayed": 0}})
    );
    let (_, page) = s.get("/v1/memories", &key);
    assert_eq!(ids(&page["data"]["memories"]), vec![b.clone()]);
    assert!(page["data"].get("as_of").is_none(), "{page}");

    let (status, q) = s.post(
        "/v1/memories/query",
        &key,
        json!({"as_of": both, "memory_type": "fact"}),
    );
    assert_eq!(status, 200, "{q}");
    assert_eq!(ids(&q["data"]["memories"]), vec![a.clone()]);
    assert_eq!(q["data"]["as_of"]["position"], json!(both));

    let (status, h) = s.get(&format!("/v1/memories/{a}/history?as_of={updated}"), &key);
    assert_eq!(status, 200, "{h}");
    let changes: Vec<&str> = h["data"]["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .map(|v| v["change"].as_str().expect("change"))
        .collect();
    assert_eq!(changes, ["created", "updated"]);
    assert_eq!(h["data"]["deleted"], json!(false));
    assert_eq!(h["data"]["versions"][1]["content"], json!("second words"));
    assert_eq!(h["data"]["as_of"]["position"], json!(updated));
    let (_, h) = s.get(&format!("/v1/memories/{a}/history"), &key);
    assert_eq!(h["data"]["versions"].as_array().expect("versions").len(), 3);
    assert_eq!(h["data"]["deleted"], json!(true));
    assert!(h["data"].get("as_of").is_none(), "{h}");
    assert_error(
        &s.get(&format!("/v1/memories/{b}/history?as_of={updated}"), &key),
        404,
        4040,
    );
}

#[test]
fn bad_as_of_values_are_refused_naming_the_field() {
    let s = Server::start();
    let key = tenant(&s);
    let (a, _) = remember(
        &s,
        &key,
        json!({"content": "something", "memory_type": "fact"}),
    );
    let (head, _) = s.head();
    let malformed = "as_of must be a log position (an integer of at least 0, as X-Auditmem-Position gives it) or an RFC 3339 time such as 2026-01-31T12:00:00Z";
    let beyond = head + 1000;
    let cases: Vec<(Value, String)> = vec![
        (json!(-1), malformed.into()),
        (json!("yesterday"), malformed.into()),
        (json!(1.5), malformed.into()),
        (
            json!(beyond),
            format!("as_of {beyond} is beyond the log's head"),
        ),
        (
            json!("2999-01-01T00:00:00Z"),
            "as_of must not be a time in the future".into(),
        ),
    ];
    for (value, want) in cases {
        let text = match &value {
            Value::String(t) => t.clone(),
            other => other.to_string(),
        };
        let text = text.replace(':', "%3A");
        let mut sent = Vec::new();
        for path in [
            format!("/v1/memories/{a}?as_of={text}"),
            format!("/v1/memories?as_of={text}"),
            format!("/v1/memories/{a}/history?as_of={text}"),
        ] {
            sent.push(s.get(&path, &key));
        }
        sent.push(s.post(
            "/v1/memories/search",
            &key,
            json!({"query": "x", "as_of": value}),
        ));
        sent.push(s.post("/v1/memories/query", &key, json!({"as_of": value})));
        for resp in sent {
            assert_error(&resp, 400, 4000);
            let message = resp.1["message"].as_str().expect("message");
            assert!(message.starts_with(&want), "{value}: {message}");
        }
    }
}

#[test]
fn an_erased_users_memories_are_absent_as_of_a_position_before_the_erasure() {
    let s = Server::start();
    let key = tenant(&s);
    let (alice, _) = remember(
        &s,
        &key,
        json!({"content": "Alice's passport number is QX-55192", "memory_type": "fact", "user_id": "alice"}),
    );
    let (bob, before) = remember(
        &s,
        &key,
        json!({"content": "Bob's passport is in the drawer", "memory_type": "fact", "user_id": "bob"}),
    );
    let (_, page) = s.get(&format!("/v1/memories?as_of={before}"), &key);
    assert_eq!(
        ids(&page["data"]["memories"]),
        vec![bob.clone(), alice.clone()]
    );

    let (status, v) = s.post("/v1/erasures", &key, json!({"user_id": "alice"}));
    assert_eq!(status, 201, "{v}");

    let (_, page) = s.get(&format!("/v1/memories?as_of={before}"), &key);
    assert_eq!(page["data"]["total"], json!(1));
    assert_eq!(ids(&page["data"]["memories"]), vec![bob.clone()]);
    assert_error(
        &s.get(&format!("/v1/memories/{alice}?as_of={before}"), &key),
        404,
        4040,
    );
    let (_, found) = s.post(
        "/v1/memories/search",
        &key,
        json!({"query": "passport number", "as_of": before, "top_k": 5}),
    );
    assert_eq!(ids(&found["data"]["results"]), vec![bob.clone()]);
    let (_, h) = s.get(
        &format!("/v1/memories/{alice}/history?as_of={before}"),
        &key,
    );
    assert_eq!(h["data"]["erased"], json!(true));
    assert_eq!(h["data"]["versions"][0]["content"], Value::Null);
    assert!(!h.to_string().contains("QX-55192"), "{h}");
}

#[test]
fn a_tenant_never_reads_another_tenants_past() {
    let s = Server::start();
    let owner = tenant(&s);
    let other = tenant(&s);
    let (m, at) = remember(
        &s,
        &owner,
        json!({"content": "owner's private plan", "memory_type": "fact"}),
    );
    let (head, _) = s.head();
    assert_eq!(
        s.get(&format!("/v1/memories/{m}?as_of={at}"), &owner).0,
        200
    );
    assert_error(
        &s.get(&format!("/v1/memories/{m}?as_of={at}"), &other),
        404,
        4040,
    );
    assert_error(
        &s.get(&format!("/v1/memories/{m}/history?as_of={at}"), &other),
        404,
        4040,
    );
    let (_, page) = s.get(&format!("/v1/memories?as_of={head}"), &other);
    assert_eq!(page["data"]["total"], json!(0));
    assert_eq!(page["data"]["as_of"]["events_replayed"], json!(0));
    let (_, found) = s.post(
        "/v1/memories/search",
        &other,
        json!({"query": "private plan", "as_of": head}),
    );
    assert_eq!(found["data"]["results"], json!([]));
}

/// How many reads as of a position were answered by a store folded for them and by a store
/// kept from an earlier read (`auditmem_as_of_reads_total`).
fn reads_as_of(s: &Server) -> (u64, u64) {
    let text = metrics_text(s);
    let count = |store: &str| {
        let series = format!("auditmem_as_of_reads_total{{store=\"{store}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&series))
            .map(|v| v.trim().parse().expect("a count"))
            .unwrap_or(0)
    };
    (count("folded"), count("kept"))
}

#[test]
fn a_second_search_as_of_the_same_position_is_answered_by_the_kept_store_the_same() {
    let s = Server::start();
    let key = tenant(&s);
    for content in [
        "The user loves hiking in the Alps every summer",
        "The user has two cats named Miso and Tofu",
        "The user climbed Mont Blanc in 2019",
    ] {
        remember(&s, &key, json!({"content": content, "memory_type": "fact"}));
    }
    let asked = json!({"query": "mountain hiking trips", "top_k": 3, "search_mode": "hybrid"});
    let (status, recorded, position) = call(
        &s,
        Method::POST,
        "/v1/memories/search",
        &key,
        Some(asked.clone()),
    );
    assert_eq!(status, 200, "{recorded}");
    // Changed since: the kept store must be the past one, not this.
    remember(
        &s,
        &key,
        json!({"content": "The user hikes mountain trails on every trip", "memory_type": "fact"}),
    );

    let mut again = asked.clone();
    again["as_of"] = json!(position);
    let (status, first) = s.post("/v1/memories/search", &key, again.clone());
    assert_eq!(status, 200, "{first}");
    assert_eq!(
        ids(&first["data"]["results"]),
        ids(&recorded["data"]["results"])
    );
    assert_eq!(reads_as_of(&s), (1, 0));
    let (status, second) = s.post("/v1/memories/search", &key, again);
    assert_eq!(status, 200, "{second}");
    assert_eq!(reads_as_of(&s), (1, 1));
    // The whole answer: ids, contents, scores, and the echo of what was replayed.
    assert_eq!(second, first);
    assert_eq!(second["data"]["as_of"]["events_replayed"], json!(3));

    // A list as of the same position asks the same kept store.
    let (status, page) = s.get(&format!("/v1/memories?as_of={position}"), &key);
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["data"]["total"], json!(3));
    assert_eq!(reads_as_of(&s), (1, 2));
}

#[test]
fn an_erasure_after_a_kept_replay_makes_the_erased_memory_absent_from_the_next() {
    let s = Server::start();
    let key = tenant(&s);
    let (alice, _) = remember(
        &s,
        &key,
        json!({"content": "Alice's passport number is QX-55192", "memory_type": "fact", "user_id": "alice"}),
    );
    let (bob, before) = remember(
        &s,
        &key,
        json!({"content": "Bob's passport is in the drawer", "memory_type": "fact", "user_id": "bob"}),
    );
    let asked = json!({"query": "passport number", "as_of": before, "top_k": 5});
    let (_, found) = s.post("/v1/memories/search", &key, asked.clone());
    assert_eq!(
        ids(&found["data"]["results"]),
        vec![alice.clone(), bob.clone()]
    );
    let (_, found) = s.post("/v1/memories/search", &key, asked.clone());
    assert_eq!(
        ids(&found["data"]["results"]),
        vec![alice.clone(), bob.clone()]
    );
    assert_eq!(reads_as_of(&s), (1, 1));

    let (status, v) = s.post("/v1/erasures", &key, json!({"user_id": "alice"}));
    assert_eq!(status, 201, "{v}");

    // The kept store held Alice's memory: it is folded again, and she is absent.
    let (_, found) = s.post("/v1/memories/search", &key, asked.clone());
    assert_eq!(ids(&found["data"]["results"]), vec![bob.clone()]);
    assert!(!found.to_string().contains("QX-55192"), "{found}");
    assert_eq!(reads_as_of(&s), (2, 1));
    let (_, page) = s.get(&format!("/v1/memories?as_of={before}"), &key);
    assert_eq!(page["data"]["total"], json!(1));
    assert_eq!(ids(&page["data"]["memories"]), vec![bob]);
    assert_eq!(reads_as_of(&s), (2, 2));
}

#[test]
fn another_tenant_as_of_the_same_position_never_gets_the_kept_store() {
    let s = Server::start();
    let owner = tenant(&s);
    let other = tenant(&s);
    remember(
        &s,
        &owner,
        json!({"content": "owner's private plan", "memory_type": "fact"}),
    );
    let (head, _) = s.head();
    let (_, page) = s.get(&format!("/v1/memories?as_of={head}"), &owner);
    assert_eq!(page["data"]["total"], json!(1));
    let (_, page) = s.get(&format!("/v1/memories?as_of={head}"), &owner);
    assert_eq!(page["data"]["total"], json!(1));
    assert_eq!(reads_as_of(&s), (1, 1));

    let (_, page) = s.get(&format!("/v1/memories?as_of={head}"), &other);
    assert_eq!(page["data"]["total"], json!(0));
    assert_eq!(page["data"]["memories"], json!([]));
    let (_, found) = s.post(
        "/v1/memories/search",
        &other,
        json!({"query": "private plan", "as_of": head}),
    );
    assert_eq!(found["data"]["results"], json!([]));
    // The other tenant's first read folded its own (empty) past; its second asked that.
    assert_eq!(reads_as_of(&s), (2, 2));
}

/// 30 reads back to back of a new tenant's one memory as of the position that wrote it, each
/// answered in full: how long they took, and how many waited their turn.
fn thirty_reads_as_of(s: &Server) -> (std::time::Duration, u64) {
    let key = tenant(s);
    let (_, position) = remember(
        s,
        &key,
        json!({"content": "The user drinks green tea", "memory_type": "fact"}),
    );
    let started = std::time::Instant::now();
    for _ in 0..30 {
        let (status, page) = s.get(&format!("/v1/memories?as_of={position}"), &key);
        assert_eq!(status, 200, "{page}");
        assert_eq!(page["data"]["total"], json!(1));
    }
    let took = started.elapsed();
    assert_eq!(reads_as_of(s), (1, 29));
    let paced =
        crate::common::metric(s, "auditmem_as_of_reads_paced_total").map_or(0, |v| v as u64);
    (took, paced)
}

#[test]
fn a_tenants_reads_as_of_a_position_keep_to_its_pace_and_wait_for_their_turns() {
    // 10 a second after a burst of 10 (docs/API.md, "Reading the past"): 30 reads back to back
    // are all answered, and the 20 past the burst are spread over at least 2 s.
    let (took, paced) = thirty_reads_as_of(&Server::start());
    assert!(
        took >= std::time::Duration::from_millis(1_990),
        "30 reads as of a position took {took:?}"
    );
    assert!((1..=20).contains(&paced), "{paced} reads waited their turn");
    // The operator's pace: none.
    let (_, paced) = thirty_reads_as_of(&Server::start_with(&["--as-of-reads-per-sec", "0"]));
    assert_eq!(paced, 0, "reads waited without a pace");
}
