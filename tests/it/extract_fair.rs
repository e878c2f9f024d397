//! Extraction that cannot hurt other tenants, against the real binary: the caps on an
//! extraction's input and on the memories it stores, credits reserved before any model work,
//! the embedder's turns across tenants, and work stopped for a caller that has gone.
//!
//! The embedder's work is observed through its counter `auditmem_embed_texts_total` (texts run
//! through the model), so the tests say how much work was done, not how long it took; where
//! they compare times, the work compared is seconds against milliseconds.

use crate::common;

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::{assert_error, Server};
use reqwest::Method;
use serde_json::{json, Value};

/// `n` statements made by `f`, one after the other.
fn statements(n: usize, f: impl Fn(usize) -> String) -> String {
    (0..n).map(f).collect::<Vec<_>>().join(" ")
}

/// The largest input the default caps let through: 50 statements the rule extractor keeps
/// (a fact each), 19,999 characters in all, so 21 credits; 399 characters a statement, so
/// that embedding them is real work (~100 tokens each).
fn max_size_input(tag: &str) -> String {
    let text = statements(50, |i| {
        let head = format!("I work at {tag} company {i} where");
        let filler = " the team builds careful tools for customers in many regions";
        let mut s = head;
        while s.len() + filler.len() < 398 {
            s.push_str(filler);
        }
        while s.len() < 398 {
            s.push('x');
        }
        s.push('.');
        s
    });
    assert_eq!(text.chars().count(), 19_999);
    text
}

/// A counter or gauge without labels from the server's `/metrics` (0 when not there yet).
fn metric(s: &Server, name: &str) -> f64 {
    crate::common::metric(s, name).unwrap_or(0.0)
}

fn credits_of(s: &Server, tenant: &str) -> Value {
    s.admin(Method::GET, &format!("/admin/v1/tenants/{tenant}"), None)
        .1["data"]["credits"]
        .clone()
}

fn set_credits(s: &Server, tenant: &str, credits: f64) {
    let (status, v) = s.admin(
        Method::PATCH,
        &format!("/admin/v1/tenants/{tenant}"),
        Some(json!({ "credits": credits })),
    );
    assert_eq!(status, 200, "{v}");
}

fn total_memories(s: &Server, key: &str) -> Value {
    s.get("/v1/memories?page_size=1", key).1["data"]["total"].clone()
}

#[test]
fn inputs_and_memories_over_the_caps_are_refused_with_400_storing_and_charging_nothing() {
    let s = Server::start();
    let (tenant, key) = s.tenant_with_key("pro");

    // At the caps: 20,000 characters (no statement worth keeping), and 50 memories.
    let (status, v) = s.post(
        "/v1/memories/extract",
        &key,
        json!({"text": "a".repeat(20_000)}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["data"]["credits_consumed"], json!(21.0), "{v}");
    let fifty = statements(50, |i| format!("I live in Town {i}."));
    let (status, v) = s.post("/v1/memories/extract", &key, json!({ "text": fifty }));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["data"]["memories"].as_array().map(Vec::len), Some(50));
    assert_eq!(credits_of(&s, &tenant), json!(100.0 - 21.0 - 2.0));

    // One past either.
    let resp = s.post(
        "/v1/memories/extract",
        &key,
        json!({"text": "a".repeat(20_001)}),
    );
    assert_error(&resp, 400, 4000);
    assert_eq!(
        resp.1["message"],
        json!("the input is 20001 characters; at most 20000 are allowed")
    );
    let conversation: Vec<Value> = (0..51)
        .map(|i| json!({"role": "user", "content": format!("I live in City {i}.")}))
        .collect();
    let resp = s.post(
        "/v1/memories/extract",
        &key,
        json!({ "messages": conversation }),
    );
    assert_error(&resp, 400, 4000);
    assert_eq!(
        resp.1["message"],
        json!("the input holds 51 memories; at most 50 are extracted in one call (nothing was stored or charged)")
    );

    // Nothing of either refusal was stored or charged; both are audited as refused.
    assert_eq!(total_memories(&s, &key), json!(50));
    assert_eq!(credits_of(&s, &tenant), json!(77.0));
    let (_, logs) = s.get("/v1/audit/logs?action=memory.extract&page_size=2", &key);
    for entry in logs["data"]["logs"].as_array().expect("logs") {
        assert_eq!(
            (
                &entry["http_status"],
                &entry["error_code"],
                &entry["credits_consumed"]
            ),
            (&json!(400), &json!(4000), &json!(0.0)),
            "{logs}"
        );
    }
}

#[test]
fn the_caps_are_settings() {
    let s = Server::start_with(&["--max-extract-chars", "30", "--max-extract-memories", "2"]);
    let (_, key) = s.tenant_with_key("pro");
    let three = "I live in Oslo. I work at Acme. My name is Bo.";
    let resp = s.post("/v1/memories/extract", &key, json!({ "text": three }));
    assert_error(&resp, 400, 4000);
    assert_eq!(
        resp.1["message"],
        json!("the input is 46 characters; at most 30 are allowed")
    );
    let s = Server::start_with(&["--max-extract-memories", "2"]);
    let (_, key) = s.tenant_with_key("pro");
    let resp = s.post("/v1/memories/extract", &key, json!({ "text": three }));
    assert_eq!(
        resp.1["message"],
        json!("the input holds 3 memories; at most 2 are extracted in one call (nothing was stored or charged)")
    );
    let (code, _, err) = common::cli(&["serve", "--max-extract-memories", "0"], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("'0' is not a whole number of at least 1"),
        "{err}"
    );
}

#[test]
fn concurrent_extractions_beyond_the_credits_are_refused_at_once_before_any_model_work() {
    let s = Arc::new(Server::start());
    let (tenant, key) = s.tenant_with_key("pro");
    // A max-size call costs 21 credits: the tenant can pay for one.
    set_credits(&s, &tenant, 30.0);
    let embedded = metric(&s, "auditmem_embed_texts_total");
    let calls = 4;
    let start = Arc::new(Barrier::new(calls));
    let threads: Vec<_> = (0..calls)
        .map(|i| {
            let (s, key, start) = (s.clone(), key.clone(), start.clone());
            let text = max_size_input(&format!("call{i}"));
            std::thread::spawn(move || {
                start.wait();
                let t0 = Instant::now();
                let resp = s.post("/v1/memories/extract", &key, json!({ "text": text }));
                (resp, t0.elapsed())
            })
        })
        .collect();
    let answers: Vec<_> = threads
        .into_iter()
        .map(|t| t.join().expect("caller"))
        .collect();
    let ok: Vec<_> = answers.iter().filter(|(r, _)| r.0 == 200).collect();
    assert_eq!(ok.len(), 1, "exactly one call is paid for: {answers:?}");
    let (won, took) = ok[0];
    assert_eq!(won.1["data"]["memories"].as_array().map(Vec::len), Some(50));
    for (resp, elapsed) in answers.iter().filter(|(r, _)| r.0 != 200) {
        assert_error(resp, 402, 4020);
        // Refused before any model work: the paid call embeds 50 long statements.
        assert!(
            *elapsed < *took / 2,
            "a refusal took {elapsed:?}, the paid call {took:?}"
        );
    }
    assert_eq!(credits_of(&s, &tenant), json!(9.0));
    assert_eq!(total_memories(&s, &key), json!(50));
    assert_eq!(
        metric(&s, "auditmem_embed_texts_total") - embedded,
        50.0,
        "only the paid call's statements were embedded"
    );
    // The refusals hold nothing afterwards: once the credits are there again, a call goes
    // through.
    set_credits(&s, &tenant, 21.0);
    let (status, v) = s.post(
        "/v1/memories/extract",
        &key,
        json!({ "text": max_size_input("again") }),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(credits_of(&s, &tenant), json!(0.0));
}

/// An input of `n` short statements the rule extractor keeps: `n` memories to embed.
fn long_job(n: usize, tag: &str) -> String {
    statements(n, |i| format!("I live in {tag} town {i}."))
}

/// Raises the caps so that one call can be a long embedding job (4,000 statements: seconds of
/// the model's time).
const LONG_JOBS: [&str; 4] = [
    "--max-extract-chars",
    "200000",
    "--max-extract-memories",
    "10000",
];

#[test]
fn another_tenants_search_takes_its_turn_during_a_long_extraction_and_a_gone_client_stops_it() {
    let s = Arc::new(Server::start_with(&LONG_JOBS));
    let (heavy_tenant, heavy) = s.tenant_with_key("pro");
    let (_, light) = s.tenant_with_key("pro");
    // Enough for the long job (one credit per started 1,000 characters and one a call).
    set_credits(&s, &heavy_tenant, 1_000.0);
    let (status, v) = s.post(
        "/v1/memories",
        &light,
        json!({"content": "I prefer tea in the morning", "memory_type": "rule"}),
    );
    assert_eq!(status, 200, "{v}");

    // The heavy tenant's call: 4,000 statements. Its client gives up after 4 s.
    let job = long_job(4_000, "heavy");
    let url = format!("{}/v1/memories/extract", s.url);
    let started = Instant::now();
    let heavy_key = heavy.clone();
    let heavy_call = std::thread::spawn(move || {
        let client = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(4))
            .build()
            .expect("client");
        client
            .post(url)
            .bearer_auth(heavy)
            .json(&json!({ "text": job }))
            .send()
            .map(|r| r.status().as_u16())
    });
    // Once its statements are being embedded, the other tenant searches.
    let deadline = Instant::now() + Duration::from_secs(3);
    while metric(&s, "auditmem_embed_texts_total") < 2.0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let t0 = Instant::now();
    let (status, v) = s.post(
        "/v1/memories/search",
        &light,
        json!({"query": "what does the user drink?"}),
    );
    let waited = t0.elapsed();
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["data"]["results"][0]["content"],
        json!("I prefer tea in the morning")
    );
    if heavy_call.is_finished() {
        let r = heavy_call.join();
        panic!("the search was answered only after the whole extraction ({waited:?}): {r:?}");
    }
    assert!(
        waited < Duration::from_secs(2),
        "the search waited {waited:?}"
    );

    // The heavy client gives up: its connection closes, and the embedder stops working for it.
    let gone = heavy_call.join().expect("heavy caller");
    assert!(gone.is_err(), "the heavy call ended in time: {gone:?}");
    let after = settled(&s, started);
    assert!(
        after < 4_000.0,
        "{after} texts embedded: the work went on after the client had gone"
    );
    assert_eq!(total_memories(&s, &heavy_key), json!(0));
}

/// Polls the embedded-texts counter until it stops moving (0.5 s unchanged), at most 20 s
/// after `since`; returns it.
fn settled(s: &Server, since: Instant) -> f64 {
    let mut last = metric(s, "auditmem_embed_texts_total");
    let mut still = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let now = metric(s, "auditmem_embed_texts_total");
        if now != last {
            last = now;
            still = Instant::now();
        } else if still.elapsed() >= Duration::from_millis(500) {
            return now;
        }
        assert!(
            since.elapsed() < Duration::from_secs(20),
            "the embedder never went idle"
        );
    }
}

#[test]
fn a_request_past_its_timeout_stops_its_embedding_releases_its_credits_and_stores_nothing() {
    let mut args = LONG_JOBS.to_vec();
    args.extend(["--request-timeout-secs", "1"]);
    let s = Server::start_with(&args);
    let (tenant, heavy) = s.tenant_with_key("pro");
    let (_, light) = s.tenant_with_key("pro");
    // With the long job's price and 10 more, the tenant can pay for an 11-credit call only
    // once the long one holds nothing.
    let job = long_job(4_000, "slow");
    let price = 1.0 + job.chars().count().div_ceil(1000) as f64;
    set_credits(&s, &tenant, price + 10.0);

    let started = Instant::now();
    let resp = s.post("/v1/memories/extract", &heavy, json!({ "text": job }));
    assert_error(&resp, 408, 4080);
    // The embedder is free at once: another tenant's search answers within its own timeout.
    let (status, v) = s.post("/v1/memories/search", &light, json!({"query": "tea"}));
    assert_eq!(status, 200, "{v}");
    let after = settled(&s, started);
    assert!(
        after < 4_000.0,
        "{after} texts embedded for a request answered 408 after 1 s"
    );
    // Nothing stored or charged, and the reservation is gone: 11 credits can be reserved.
    assert_eq!(total_memories(&s, &heavy), json!(0));
    assert_eq!(credits_of(&s, &tenant), json!(price + 10.0));
    let (status, v) = s.post(
        "/v1/memories/extract",
        &heavy,
        json!({"text": format!("I live in Oslo. {}", "a".repeat(9_900))}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["data"]["credits_consumed"], json!(11.0), "{v}");
    assert_eq!(credits_of(&s, &tenant), json!(price - 1.0));
}
