//! `auditmem mcp`: the MCP tools over stdio for desktop hosts, as a thin proxy to a running
//! service's `/mcp`. Each JSON-RPC message the host writes (one a line) is POSTed there with
//! the key and the scope binding given on the command line; each answer is written back as
//! one line. Nothing is decided here: the service authenticates, confines, audits and answers.
//!
//! Messages are forwarded concurrently (a slow tool call does not hold up a ping); their
//! answers are written whole, one at a time, in the order they arrive.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use clap::Args;
use serde_json::{json, Value};

use super::{AGENT_HEADER, SESSION_HEADER, USER_HEADER};

#[derive(Args, Debug)]
pub struct McpArgs {
    /// Base URL of the service (its `/mcp` is called).
    #[arg(long, env = "AUDITMEM_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// The API key the tools call with.
    #[arg(long, env = "AUDITMEM_API_KEY", hide_env_values = true)]
    pub key: String,
    /// Binds the connection to this end user: every tool reads and writes only their memories.
    #[arg(long, env = "AUDITMEM_USER_ID")]
    pub user_id: Option<String>,
    /// Narrows the binding to this agent of the user.
    #[arg(long, env = "AUDITMEM_AGENT_ID", requires = "user_id")]
    pub agent_id: Option<String>,
    /// Narrows the binding to this session of the user.
    #[arg(long, env = "AUDITMEM_SESSION_ID", requires = "user_id")]
    pub session_id: Option<String>,
    /// A PEM bundle of CA certificates trusted for an https --url besides the Mozilla roots.
    #[arg(long, env = "AUDITMEM_CA_FILE")]
    pub ca_file: Option<PathBuf>,
}

/// What every forwarded message shares.
struct Upstream {
    client: reqwest::blocking::Client,
    endpoint: String,
    headers: Vec<(&'static str, String)>,
    /// The protocol version the service answered `initialize` with, sent on later requests.
    protocol: Mutex<Option<String>>,
    /// The session the service opened, if it keeps sessions.
    session: Mutex<Option<String>>,
    out: Mutex<std::io::Stdout>,
}

pub fn run(args: McpArgs) -> anyhow::Result<ExitCode> {
    let roots = crate::http_client::ExtraRoots::load(args.ca_file.as_deref())
        .map_err(anyhow::Error::msg)?;
    // No whole-request timeout: a tool call (an extraction) may take as long as the service
    // allows it (`--request-timeout-secs`).
    let client = crate::http_client::blocking(None, &roots)?;
    let mut headers = vec![("authorization", format!("Bearer {}", args.key))];
    for (name, v) in [
        (USER_HEADER, args.user_id),
        (AGENT_HEADER, args.agent_id),
        (SESSION_HEADER, args.session_id),
    ] {
        headers.extend(v.map(|v| (name, v)));
    }
    let up = Arc::new(Upstream {
        client,
        endpoint: format!("{}/mcp", args.url.trim_end_matches('/')),
        headers,
        protocol: Mutex::new(None),
        session: Mutex::new(None),
        out: Mutex::new(std::io::stdout()),
    });
    let mut workers = Vec::new();
    for line in std::io::stdin().lock().lines() {
        let line = line.context("reading stdin")?;
        if line.trim().is_empty() {
            continue;
        }
        let up = Arc::clone(&up);
        // `initialize` first and alone: later requests carry the version it settles.
        let initialize = serde_json::from_str::<Value>(&line)
            .ok()
            .is_some_and(|m| m.get("method").and_then(Value::as_str) == Some("initialize"));
        let worker = std::thread::spawn(move || up.forward(&line));
        if initialize {
            let _ = worker.join();
        } else {
            workers.push(worker);
        }
        workers.retain(|w| !w.is_finished());
    }
    for w in workers {
        let _ = w.join();
    }
    Ok(ExitCode::SUCCESS)
}

impl Upstream {
    /// Forwards one message and writes what comes back.
    fn forward(&self, line: &str) {
        let id = serde_json::from_str::<Value>(line)
            .ok()
            .and_then(|m| m.get("id").cloned());
        for answer in self.post(line, id.as_ref()) {
            if let Some(v) = answer
                .pointer("/result/protocolVersion")
                .and_then(Value::as_str)
            {
                if let Ok(mut p) = self.protocol.lock() {
                    *p = Some(v.to_string());
                }
            }
            self.write(&answer);
        }
    }

    /// The messages the service answers `line` with: none for a notification.
    fn post(&self, line: &str, id: Option<&Value>) -> Vec<Value> {
        let mut req = self
            .client
            .post(&self.endpoint)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(line.to_string());
        for (name, v) in &self.headers {
            req = req.header(*name, v);
        }
        let protocol = self.protocol.lock().ok().and_then(|p| p.clone());
        if let Some(p) = protocol {
            req = req.header("mcp-protocol-version", p);
        }
        let session = self.session.lock().ok().and_then(|s| s.clone());
        if let Some(s) = session {
            req = req.header("mcp-session-id", s);
        }
        let resp = match req.send() {
            Ok(r) => r,
            Err(e) => {
                let msg = format!(
                    "{}: {}",
                    crate::http_client::redacted(&self.endpoint),
                    crate::http_client::chain(&e)
                );
                return error_for(id, -32000, &msg, None);
            }
        };
        if let Some(s) = resp
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
        {
            if let Ok(mut g) = self.session.lock() {
                *g = Some(s.to_string());
            }
        }
        let status = resp.status().as_u16();
        let sse = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("text/event-stream"));
        let text = match resp.text() {
            Ok(t) => t,
            Err(e) => return error_for(id, -32000, &crate::http_client::chain(&e), None),
        };
        if text.trim().is_empty() {
            return Vec::new();
        }
        let messages: Vec<Value> = match sse {
            true => text
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .filter_map(|d| serde_json::from_str(d.trim()).ok())
                .collect(),
            false => serde_json::from_str::<Value>(&text).into_iter().collect(),
        };
        match messages.first() {
            // The service's own envelope (a 401 before any tool): its code and message.
            Some(m) if m.get("jsonrpc").is_none() => {
                let code = m.get("code").and_then(Value::as_i64).unwrap_or(-32000);
                let msg = m
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("refused");
                error_for(id, code, msg, Some(status))
            }
            Some(_) => messages,
            None => error_for(id, -32000, &format!("HTTP {status}: {text}"), Some(status)),
        }
    }

    fn write(&self, message: &Value) {
        if let Ok(mut out) = self.out.lock() {
            // A host that closed our stdout has gone: nothing is left to tell it.
            let _ = writeln!(out, "{message}");
            let _ = out.flush();
        }
    }
}

/// A JSON-RPC error answering the request `id` (none for a notification).
fn error_for(id: Option<&Value>, code: i64, message: &str, status: Option<u16>) -> Vec<Value> {
    let Some(id) = id else {
        tracing::warn!(code, message, "a notification was refused");
        return Vec::new();
    };
    let mut error = json!({ "code": code, "message": message });
    if let Some(s) = status {
        error["data"] = json!({ "http_status": s });
    }
    vec![json!({ "jsonrpc": "2.0", "id": id, "error": error })]
}
