//! Search modes: `keyword` (BM25 per tenant) and `hybrid` (fused with semantic), their scores,
//! `explain`, per-tenant statistics, and the index following updates, deletes and replay.

use reqwest::Method;
use serde_json::{json, Value};

use crate::common::{assert_error, replayed_copy, Server};

const MEMORIES: [&str; 6] = [
    "Error E1234 appears when the disk quota is exceeded",
    "Error E1243 means the session token expired",
    "The user prefers green tea over coffee",
    "Order ORD-81143 shipped to Lisbon last week",
    "The deploy pipeline runs on every merge to main",
    "The user's manager is called Priya",
];

fn search(s: &Server, key: &str, body: Value) -> Vec<Value> {
    let (status, v) = s.post("/v1/memories/search", key, body.clone());
    assert_eq!(status, 200, "{body}: {v}");
    v["data"]["results"].as_array().expect("results").clone()
}

fn contents(results: &[Value]) -> Vec<&str> {
    results
        .iter()
        .map(|r| r["content"].as_str().unwrap_or_default())
        .collect()
}

#[test]
fn keyword_and_hybrid_search_find_exact_terms_per_tenant() {
    let mut s = Server::start();
    let (_, key) = s.tenant_with_key("pro");
    let mut ids = Vec::new();
    for m in MEMORIES {
        let (status, v) = s.post(
            "/v1/memories",
            &key,
            json!({"content": m, "memory_type": "fact"}),
        );
        assert_eq!(status, 200, "{v}");
        ids.push(v["data"]["id"].as_str().expect("id").to_string());
    }

    // Keyword search finds the exact code, ranked by BM25, each result with its cosine
    let kw = search(
        &s,
        &key,
        json!({"query": "E1243", "search_mode": "keyword", "top_k": 5}),
    );
    assert_eq!(
        contents(&kw),
        vec!["Error E1243 means the session token expired"]
    );
    let r = &kw[0];
    let bm25 = r["keyword_score"].as_f64().expect("keyword_score");
    assert!(bm25 > 0.0, "{r}");
    assert_eq!(r["final_score"], r["keyword_score"]);
    let cosine = r["score"].as_f64().expect("score");
    assert!((-1.0..=1.0).contains(&cosine), "{r}");

    // Hybrid puts it first too, beside what semantic search finds; ranked by final_score
    let hy = search(
        &s,
        &key,
        json!({"query": "E1243", "search_mode": "hybrid", "top_k": 3, "explain": true}),
    );
    assert_eq!(hy.len(), 3, "{hy:?}");
    assert_eq!(
        hy[0]["content"],
        json!("Error E1243 means the session token expired")
    );
    let finals: Vec<f64> = hy
        .iter()
        .map(|r| r["final_score"].as_f64().expect("final"))
        .collect();
    assert!(finals.windows(2).all(|w| w[0] >= w[1]), "{finals:?}");
    let e = &hy[0]["explain"];
    assert_eq!(e["search_mode"], json!("hybrid"));
    assert_eq!(e["keyword_rank"], json!(1));
    assert_eq!(e["rrf_k"], json!(2.0));
    assert_eq!(e["keyword_weight"], json!(1.5));
    assert_eq!(e["keyword_score"], hy[0]["keyword_score"]);
    // The fused score is the weighted reciprocal ranks' sum (k 2, keyword weight 1.5)
    let sem_rank = e["semantic_rank"].as_u64().map(|r| 1.0 / (2.0 + r as f64));
    let want = 1.5 / 3.0 + sem_rank.unwrap_or(0.0);
    assert!((finals[0] - want).abs() < 2e-6, "{} vs {want}", finals[0]);
    // A result keyword search did not contribute shows no keyword score
    assert!(
        hy.iter()
            .skip(1)
            .all(|r| r.get("keyword_score").is_none() && r["explain"]["keyword_rank"].is_null()),
        "{hy:?}"
    );

    // Hybrid is the default: a search naming no mode answers what hybrid does
    let default = search(&s, &key, json!({"query": "E1243", "top_k": 3}));
    let ids_of = |rs: &[Value]| rs.iter().map(|r| r["id"].clone()).collect::<Vec<_>>();
    assert_eq!(ids_of(&default), ids_of(&hy));
    assert_eq!(default[0]["final_score"], hy[0]["final_score"]);

    // Semantic is the interface's search: no keyword part, no explain
    let sem = search(
        &s,
        &key,
        json!({"query": "E1243", "top_k": 3, "search_mode": "semantic"}),
    );
    assert!(
        sem.iter()
            .all(|r| r.get("keyword_score").is_none() && r.get("explain").is_none()),
        "{sem:?}"
    );

    // Another tenant's memories never weigh in this tenant's scores or results
    let (_, other) = s.tenant_with_key("pro");
    for i in 0..20 {
        let (status, v) = s.post(
            "/v1/memories",
            &other,
            json!({"content": format!("Ticket {i}: error E1243 again"), "memory_type": "fact"}),
        );
        assert_eq!(status, 200, "{v}");
    }
    let again = search(
        &s,
        &key,
        json!({"query": "E1243", "search_mode": "keyword"}),
    );
    assert_eq!(contents(&again), contents(&kw));
    assert_eq!(again[0]["keyword_score"], kw[0]["keyword_score"]);
    let theirs = search(
        &s,
        &other,
        json!({"query": "E1243", "search_mode": "keyword", "top_k": 100}),
    );
    assert_eq!(theirs.len(), 20);
    assert!(!contents(&theirs)
        .iter()
        .any(|c| c.contains("session token")));

    // The index follows updates and deletes
    let (status, v) = s.call(
        Method::PATCH,
        &format!("/v1/memories/{}", ids[3]),
        Some(&key),
        Some(&json!({"content": "Order ORD-99001 shipped to Porto"})),
    );
    assert_eq!(status, 200, "{v}");
    assert!(search(
        &s,
        &key,
        json!({"query": "81143", "search_mode": "keyword"})
    )
    .is_empty());
    assert_eq!(
        contents(&search(
            &s,
            &key,
            json!({"query": "ORD-99001", "search_mode": "keyword"})
        )),
        vec!["Order ORD-99001 shipped to Porto"]
    );
    let (status, v) = s.call(
        Method::DELETE,
        &format!("/v1/memories/{}", ids[5]),
        Some(&key),
        None,
    );
    assert_eq!(status, 200, "{v}");
    assert!(search(
        &s,
        &key,
        json!({"query": "Priya", "search_mode": "keyword"})
    )
    .is_empty());
    // and honours filters
    assert!(search(
        &s,
        &key,
        json!({"query": "E1243", "search_mode": "keyword", "memory_type": "rule"})
    )
    .is_empty());

    // Every bad setting is named
    for (body, want) in [
        (
            json!({"query": "q", "search_mode": "fuzzy"}),
            "search_mode must be one of semantic, keyword, hybrid",
        ),
        (
            json!({"query": "q", "rrf_k": -1}),
            "rrf_k must be a number from 0 to 1000",
        ),
        (
            json!({"query": "q", "keyword_weight": "high"}),
            "keyword_weight must be a number from 0.0 to 10.0",
        ),
        (
            json!({"query": "q", "explain": 1}),
            "explain must be a boolean",
        ),
    ] {
        let resp = s.post("/v1/memories/search", &key, body.clone());
        assert_error(&resp, 400, 4000);
        assert_eq!(resp.1["message"], json!(want), "{body}");
    }

    // The audit entry records each result's source
    let (_, audit) = s.get("/v1/audit/logs?action=memory.search&page_size=100", &key);
    let logs = audit["data"]["logs"].as_array().expect("logs");
    let mut sources = Vec::new();
    for e in logs {
        let (_, d) = s.get(
            &format!("/v1/audit/logs/{}", e["id"].as_str().expect("id")),
            &key,
        );
        if d["data"]["memory_query"] == json!(["ORD-99001"]) {
            sources.push(d["data"]["memory_results"][0]["source"].clone());
        }
    }
    assert_eq!(sources, vec![json!("keyword")]);

    // And replay rebuilds the index to the same answers
    let queries = [
        json!({"query": "E1243", "search_mode": "hybrid", "explain": true}),
        json!({"query": "ORD-99001", "search_mode": "keyword"}),
        json!({"query": "tea or coffee", "search_mode": "hybrid"}),
    ];
    let before: Vec<Vec<Value>> = queries
        .iter()
        .map(|q| search(&s, &key, q.clone()))
        .collect();
    s.stop();
    let tmp = tempfile::tempdir().expect("tempdir");
    let replayed = tmp.path().join("replayed");
    replayed_copy(&s.data_dir, &replayed);
    let r = Server::start_on(&replayed);
    let after: Vec<Vec<Value>> = queries
        .iter()
        .map(|q| search(&r, &key, q.clone()))
        .collect();
    assert_eq!(after, before);
}
