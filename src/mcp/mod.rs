//! MCP (Model Context Protocol): the memory and audit tools, served as streamable HTTP at
//! `/mcp` on the service's own listener, and over stdio by `auditmem mcp` ([`proxy`]).
//!
//! **One code path.** A tool call is the REST call it names, made in process: [`Tools`] turns
//! the tool's arguments into that route's request (its method, path, query or JSON body) and
//! sends it through the same router, so the `/v1` gate authenticates it with the key the MCP
//! request presented, checks its permission, rate limit and credits, runs the same handler and
//! command, and appends its audit entry (action as the route's: `memory.write`,
//! `memory.search`, ...). Nothing here decides anything about memories or the audit log.
//!
//! What the gate adds for MCP ([`Via`], a request extension no HTTP client can set; the call
//! itself is `api::inprocess`, which the mem0 compatibility API uses too): the
//! entry's `metadata` gains `"transport": "mcp"` and `"mcp_tool": "<tool>"`, and the caller is
//! bound to the scope the host set on the connection (`X-Auditmem-User-Id`,
//! `X-Auditmem-Agent-Id`, `X-Auditmem-Session-Id`: `api::scope`). No tool argument names a
//! user: the scope comes from the key and the connection, never from the model.
//!
//! Answers: a success is the route's `data`, as the tool result's structured content and as
//! its text (compact JSON) for the model; a refusal is a JSON-RPC error whose `code` and
//! `message` are the error envelope's (`4040`, "memory not found"), with the HTTP status in
//! `data.http_status`.
//!
//! Sessions: the transport runs stateless with JSON responses: every POST carries its own
//! credentials and binding, so nothing about a caller is kept between requests, and any
//! number of hosts may call at once.

pub mod proxy;
mod tools;

use std::sync::Arc;

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use crate::api::gate::{Transport, Via};
use crate::api::inprocess::InProcess;
use crate::api::state::AppState;
pub use tools::Tools;

/// The header a host binds a connection's `user_id` with; `-Agent-Id` and `-Session-Id`
/// narrow it further.
pub const USER_HEADER: &str = "x-auditmem-user-id";
pub const AGENT_HEADER: &str = "x-auditmem-agent-id";
pub const SESSION_HEADER: &str = "x-auditmem-session-id";

/// The `/mcp` service: rmcp's streamable-HTTP transport over [`Tools`], whose calls go through
/// `api`, the `/v1` routes as the service serves them.
pub fn service(state: &AppState) -> StreamableHttpService<Tools, LocalSessionManager> {
    let api = InProcess::new(state);
    let max_body = state.settings.max_body_bytes;
    // Every request is authenticated by its API key, so the transport's DNS-rebinding guard (a
    // loopback-only `Host`) would only refuse the service's real names.
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_max_request_body_bytes(max_body)
        .disable_allowed_hosts();
    StreamableHttpService::new(
        move || Ok(Tools::new(api.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    )
}

/// What the MCP layer tells the gate about a tool call.
fn via(tool: &'static str, binding: Option<auditmem_projections::KeyScope>) -> Via {
    Via {
        transport: Transport::Mcp,
        call: tool,
        binding,
    }
}
