//! The tools: each one's arguments (their JSON Schema derived here; its bounds are the
//! constants of `crate::wire` the REST types check with, never literals), and the `/v1`
//! request it is.

use std::borrow::Cow;
use std::net::SocketAddr;

use auditmem_projections::KeyScope;
use axum::extract::ConnectInfo;
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::Extension;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, ErrorCode, ErrorData, Implementation, ServerCapabilities,
    ServerConfig,
};
use rmcp::{tool, tool_handler, tool_router, ServerHandler};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::{via, AGENT_HEADER, SESSION_HEADER, USER_HEADER};
use crate::api::inprocess::{segment, InProcess};
use crate::wire::field::Check;
use crate::wire::memory::fields::{MAX_IMPORTANCE, MIN_IMPORTANCE};
use crate::wire::memory::search::{MAX_TOP_K, MIN_TOP_K};
use crate::wire::memory::{AgentId, SessionId, UserId};
use crate::wire::query::{MAX_PAGE_SIZE, MIN_PAGE};
use crate::wire::transparency::MIN_PROVEN_SIZE;

/// The tools of one MCP connection, calling the `/v1` routes of `api`.
#[derive(Clone)]
pub struct Tools {
    api: InProcess,
    tool_router: ToolRouter<Tools>,
}

/// A chat message, as OpenAI's chat format and extraction take it.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct Message {
    /// `user`, `assistant`, `system` or `tool`.
    pub role: String,
    pub content: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AddMemory {
    /// The text to remember (or to extract memories from, with `infer`). Exactly one of
    /// `text` and `messages`.
    pub text: Option<String>,
    /// A conversation to remember (or to extract memories from, with `infer`).
    pub messages: Option<Vec<Message>>,
    /// Default true: extract the facts, rules and context worth keeping (`POST
    /// /v1/memories/extract`, charged in credits). False: store `text` as one memory, or each
    /// message as one.
    pub infer: Option<bool>,
    /// `fact` (the default), `rule` or `context` (not with `infer`).
    pub memory_type: Option<String>,
    /// 0 to 1 (not with `infer`).
    #[schemars(range(min = MIN_IMPORTANCE, max = MAX_IMPORTANCE))]
    pub importance: Option<f64>,
    /// A JSON object stored with every memory written.
    pub metadata: Option<Map<String, Value>>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchMemories {
    /// What to look for.
    pub query: String,
    /// How many results, 1 to 100 (default 5).
    #[schemars(range(min = MIN_TOP_K, max = MAX_TOP_K))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_k: Option<u64>,
    /// A filter (docs/API.md: `AND`/`OR`/`NOT`, `eq`, `in`, `gte`, ... over `memory_type`,
    /// `importance`, `created_at`, `metadata.<key>`), within the connection's scope.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filters: Option<Value>,
    /// `semantic` (default), `keyword` or `hybrid`.
    #[serde(
        rename(serialize = "search_mode"),
        skip_serializing_if = "Option::is_none"
    )]
    pub mode: Option<String>,
    /// Only memories of this type: `fact`, `rule` or `context`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_type: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetMemories {
    /// A filter, as `search_memories` takes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filters: Option<Value>,
    /// Only memories of this type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_type: Option<String>,
    /// From 1 (default 1).
    #[schemars(range(min = MIN_PAGE))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page: Option<u64>,
    /// 1 to 100 (default 20).
    #[schemars(range(min = MIN_PAGE, max = MAX_PAGE_SIZE))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_size: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryId {
    /// The memory's id.
    pub memory_id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateMemory {
    /// The memory's id.
    pub memory_id: String,
    /// Its new text.
    pub text: Option<String>,
    /// Its new importance, 0 to 1.
    #[schemars(range(min = MIN_IMPORTANCE, max = MAX_IMPORTANCE))]
    pub importance: Option<f64>,
    /// Its new metadata object (replaces the old one).
    pub metadata: Option<Map<String, Value>>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeleteAllMemories {
    /// Only memories of this type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_type: Option<String>,
    /// Only memories this filter matches.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filters: Option<Value>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListAuditLogs {
    /// ISO 8601.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    /// ISO 8601, inclusive.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_time: Option<String>,
    /// An exact action, e.g. `memory.write`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// From 1 (default 1).
    #[schemars(range(min = MIN_PAGE))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page: Option<u64>,
    /// 1 to 100 (default 50).
    #[schemars(range(min = MIN_PAGE, max = MAX_PAGE_SIZE))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_size: Option<u64>,
    /// The `next_cursor` of a previous page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AuditId {
    /// The audit entry's id.
    pub audit_id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProveAuditLog {
    /// The audit entry's id.
    pub audit_id: String,
    /// The tree size to prove inclusion in (default: the latest signed checkpoint's).
    #[schemars(range(min = MIN_PROVEN_SIZE))]
    pub tree_size: Option<u64>,
}

/// A JSON-RPC error from our envelope's code and message.
fn refused(code: i64, message: impl Into<Cow<'static, str>>, http_status: u16) -> ErrorData {
    ErrorData::new(
        ErrorCode(i32::try_from(code).unwrap_or(i32::MAX)),
        message,
        Some(json!({ "http_status": http_status })),
    )
}

/// An argument refused before any route is called (the shape no route has).
fn invalid(message: impl Into<Cow<'static, str>>) -> ErrorData {
    refused(4000, message, 400)
}

/// The scope the host bound the connection to, from its headers.
fn binding(headers: &HeaderMap) -> Result<Option<KeyScope>, ErrorData> {
    fn header<T: Check<Raw = Value>>(
        headers: &HeaderMap,
        name: &'static str,
        of: fn(T) -> String,
    ) -> Result<Option<String>, ErrorData> {
        let Some(v) = headers.get(name) else {
            return Ok(None);
        };
        let text = v
            .to_str()
            .map_err(|_| invalid(format!("{name} must be visible ASCII")))?;
        T::check(Value::String(text.to_string()))
            .map(|t| Some(of(t)))
            .map_err(|e| invalid(format!("{name}: {}", e.0)))
    }
    let user = header::<UserId>(headers, USER_HEADER, |u| u.0)?;
    let agent = header::<AgentId>(headers, AGENT_HEADER, |a| a.0)?;
    let session = header::<SessionId>(headers, SESSION_HEADER, |s| s.0)?;
    match user {
        Some(user_id) => Ok(Some(KeyScope {
            user_id,
            agent_id: agent,
            session_id: session,
        })),
        None if agent.is_some() || session.is_some() => Err(invalid(format!(
            "{AGENT_HEADER} and {SESSION_HEADER} narrow {USER_HEADER}, which is missing"
        ))),
        None => Ok(None),
    }
}

impl Tools {
    pub fn new(api: InProcess) -> Self {
        Tools {
            api,
            tool_router: Self::tool_router(),
        }
    }

    /// Calls `method target` with `body` (JSON) as the MCP request `parts` asks it, as the
    /// tool `tool`.
    async fn call(
        &self,
        parts: &Parts,
        tool: &'static str,
        method: Method,
        target: String,
        body: Option<Value>,
    ) -> Result<CallToolResult, ErrorData> {
        let binding = binding(&parts.headers)?;
        let peer = parts.extensions.get::<ConnectInfo<SocketAddr>>().cloned();
        let answer = self
            .api
            .call(
                &parts.headers,
                peer,
                via(tool, binding),
                method,
                &target,
                body.as_ref(),
            )
            .await;
        if let Some(data) = answer.data() {
            let data = match data {
                Value::Object(o) => Value::Object(o.clone()),
                Value::Null => json!({}),
                other => json!({ "result": other }),
            };
            let text = data.to_string();
            let mut result = CallToolResult::structured(data);
            result.content = vec![ContentBlock::text(text)];
            return Ok(result);
        }
        let (code, message) = answer.refusal();
        Err(refused(code, message, answer.status.as_u16()))
    }
}

/// A JSON object of the arguments given, for a body or a query string.
fn object(v: impl Serialize) -> Result<Value, ErrorData> {
    serde_json::to_value(v).map_err(|e| invalid(e.to_string()))
}

fn query(v: impl Serialize) -> Result<String, ErrorData> {
    serde_urlencoded::to_string(v).map_err(|e| invalid(e.to_string()))
}

fn with_query(path: String, query: String) -> String {
    match query.is_empty() {
        true => path,
        false => format!("{path}?{query}"),
    }
}

#[tool_router]
impl Tools {
    /// Remembers a text or a conversation for the connection's user.
    #[tool(
        name = "add_memory",
        description = "Remember a text or a conversation for this user. With infer (the default) the service extracts the facts, rules and context worth keeping; without, it stores the text, or each message, as given."
    )]
    async fn add_memory(
        &self,
        Parameters(a): Parameters<AddMemory>,
        Extension(parts): Extension<Parts>,
    ) -> Result<CallToolResult, ErrorData> {
        let metadata = a.metadata.map(Value::Object);
        if a.text.is_some() == a.messages.is_some() {
            return Err(invalid("add_memory takes exactly one of text and messages"));
        }
        if a.infer.unwrap_or(true) {
            if a.memory_type.is_some() || a.importance.is_some() {
                return Err(invalid(
                    "memory_type and importance are the extractor's to decide with infer; pass infer: false to set them",
                ));
            }
            let mut body = Map::new();
            if let Some(text) = a.text {
                body.insert("text".into(), Value::String(text));
            }
            if let Some(messages) = a.messages {
                body.insert("messages".into(), object(messages)?);
            }
            if let Some(m) = metadata {
                body.insert("metadata".into(), m);
            }
            let body = Some(Value::Object(body));
            let path = "/v1/memories/extract".to_string();
            return self
                .call(&parts, "add_memory", Method::POST, path, body)
                .await;
        }
        let item = |content: String| {
            let mut m = Map::new();
            m.insert("content".into(), Value::String(content));
            let t = a.memory_type.as_deref().unwrap_or("fact");
            m.insert("memory_type".into(), Value::String(t.to_string()));
            if let Some(i) = a.importance {
                m.insert("importance".into(), json!(i));
            }
            if let Some(md) = &metadata {
                m.insert("metadata".into(), md.clone());
            }
            Value::Object(m)
        };
        match (a.text.clone(), a.messages.as_ref()) {
            (Some(text), _) => {
                let body = Some(item(text));
                let path = "/v1/memories".to_string();
                self.call(&parts, "add_memory", Method::POST, path, body)
                    .await
            }
            (None, Some(messages)) => {
                let items: Vec<Value> = messages.iter().map(|m| item(m.content.clone())).collect();
                let body = Some(json!({ "memories": items }));
                let path = "/v1/memories/batch".to_string();
                self.call(&parts, "add_memory", Method::POST, path, body)
                    .await
            }
            (None, None) => Err(invalid("add_memory takes exactly one of text and messages")),
        }
    }

    #[tool(
        name = "search_memories",
        description = "Search this user's memories by meaning (semantic), by words (keyword) or both (hybrid); the best first."
    )]
    async fn search_memories(
        &self,
        Parameters(a): Parameters<SearchMemories>,
        Extension(parts): Extension<Parts>,
    ) -> Result<CallToolResult, ErrorData> {
        let body = Some(object(a)?);
        let path = "/v1/memories/search".to_string();
        self.call(&parts, "search_memories", Method::POST, path, body)
            .await
    }

    #[tool(
        name = "get_memories",
        description = "List this user's memories, newest first, a page at a time, optionally filtered."
    )]
    async fn get_memories(
        &self,
        Parameters(a): Parameters<GetMemories>,
        Extension(parts): Extension<Parts>,
    ) -> Result<CallToolResult, ErrorData> {
        let body = Some(object(a)?);
        let path = "/v1/memories/query".to_string();
        self.call(&parts, "get_memories", Method::POST, path, body)
            .await
    }

    #[tool(
        name = "get_memory",
        description = "One of this user's memories, by id."
    )]
    async fn get_memory(
        &self,
        Parameters(a): Parameters<MemoryId>,
        Extension(parts): Extension<Parts>,
    ) -> Result<CallToolResult, ErrorData> {
        let path = format!("/v1/memories/{}", segment(&a.memory_id));
        self.call(&parts, "get_memory", Method::GET, path, None)
            .await
    }

    #[tool(
        name = "update_memory",
        description = "Change one of this user's memories: its text, importance or metadata."
    )]
    async fn update_memory(
        &self,
        Parameters(a): Parameters<UpdateMemory>,
        Extension(parts): Extension<Parts>,
    ) -> Result<CallToolResult, ErrorData> {
        let mut body = Map::new();
        if let Some(text) = a.text {
            body.insert("content".into(), Value::String(text));
        }
        if let Some(i) = a.importance {
            body.insert("importance".into(), json!(i));
        }
        if let Some(m) = a.metadata {
            body.insert("metadata".into(), Value::Object(m));
        }
        let path = format!("/v1/memories/{}", segment(&a.memory_id));
        let body = Some(Value::Object(body));
        self.call(&parts, "update_memory", Method::PATCH, path, body)
            .await
    }

    #[tool(
        name = "delete_memory",
        description = "Delete one of this user's memories, by id."
    )]
    async fn delete_memory(
        &self,
        Parameters(a): Parameters<MemoryId>,
        Extension(parts): Extension<Parts>,
    ) -> Result<CallToolResult, ErrorData> {
        let path = format!("/v1/memories/{}", segment(&a.memory_id));
        self.call(&parts, "delete_memory", Method::DELETE, path, None)
            .await
    }

    #[tool(
        name = "delete_all_memories",
        description = "Delete every memory of this user (of the connection's scope), or those of a type or a filter."
    )]
    async fn delete_all_memories(
        &self,
        Parameters(a): Parameters<DeleteAllMemories>,
        Extension(parts): Extension<Parts>,
    ) -> Result<CallToolResult, ErrorData> {
        let mut body = object(&a)?;
        // "All of the scope" is the scope's own filter: the route takes no empty request.
        if a.memory_type.is_none() && a.filters.is_none() {
            if let (Some(scope), Value::Object(m)) = (binding(&parts.headers)?, &mut body) {
                let mut f = Map::new();
                f.insert("user_id".into(), Value::String(scope.user_id));
                for (k, v) in [
                    ("agent_id", scope.agent_id),
                    ("session_id", scope.session_id),
                ] {
                    if let Some(v) = v {
                        f.insert(k.into(), Value::String(v));
                    }
                }
                m.insert("filters".into(), Value::Object(f));
            }
        }
        let path = "/v1/memories".to_string();
        self.call(
            &parts,
            "delete_all_memories",
            Method::DELETE,
            path,
            Some(body),
        )
        .await
    }

    #[tool(
        name = "memory_history",
        description = "Every version of one of this user's memories, from the log: created, changed, superseded, deleted."
    )]
    async fn memory_history(
        &self,
        Parameters(a): Parameters<MemoryId>,
        Extension(parts): Extension<Parts>,
    ) -> Result<CallToolResult, ErrorData> {
        let path = format!("/v1/memories/{}/history", segment(&a.memory_id));
        self.call(&parts, "memory_history", Method::GET, path, None)
            .await
    }

    #[tool(
        name = "list_audit_logs",
        description = "The tenant's audit log, newest first: every call made with its keys, over REST and MCP."
    )]
    async fn list_audit_logs(
        &self,
        Parameters(a): Parameters<ListAuditLogs>,
        Extension(parts): Extension<Parts>,
    ) -> Result<CallToolResult, ErrorData> {
        let path = with_query("/v1/audit/logs".to_string(), query(&a)?);
        self.call(&parts, "list_audit_logs", Method::GET, path, None)
            .await
    }

    #[tool(
        name = "get_audit_log",
        description = "One audit entry, with its request and response."
    )]
    async fn get_audit_log(
        &self,
        Parameters(a): Parameters<AuditId>,
        Extension(parts): Extension<Parts>,
    ) -> Result<CallToolResult, ErrorData> {
        let path = format!("/v1/audit/logs/{}", segment(&a.audit_id));
        self.call(&parts, "get_audit_log", Method::GET, path, None)
            .await
    }

    #[tool(
        name = "prove_audit_log",
        description = "An audit entry's inclusion proof in the transparency log, with the signed checkpoint it is proven against (docs/VERIFYING.md)."
    )]
    async fn prove_audit_log(
        &self,
        Parameters(a): Parameters<ProveAuditLog>,
        Extension(parts): Extension<Parts>,
    ) -> Result<CallToolResult, ErrorData> {
        let path = format!("/v1/audit/logs/{}/proof", segment(&a.audit_id));
        let q = match a.tree_size {
            Some(n) => format!("tree_size={n}"),
            None => String::new(),
        };
        self.call(
            &parts,
            "prove_audit_log",
            Method::GET,
            with_query(path, q),
            None,
        )
        .await
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Tools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("auditmem", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Memory for this user, and the tamper-evident audit log of every call: add, search, list, change and delete memories; read and prove audit entries.",
            )
    }
}

#[cfg(test)]
mod tests {
    use schemars::schema_for;

    use super::*;
    use crate::wire::audit::list::DEFAULT_PAGE_SIZE as AUDIT_PAGE_SIZE;
    use crate::wire::memory::list::DEFAULT_PAGE_SIZE as MEMORY_PAGE_SIZE;
    use crate::wire::memory::search::DEFAULT_TOP_K;

    /// A property of a tool's argument schema: its bounds and its description.
    fn property(schema: schemars::Schema, name: &str) -> (Value, Value, String) {
        let v = serde_json::to_value(schema).unwrap_or_default();
        let p = &v["properties"][name];
        let text = p["description"].as_str().unwrap_or("").to_string();
        (p["minimum"].clone(), p["maximum"].clone(), text)
    }

    /// The tools' bounds are the wire types' constants, and each description states them, so
    /// a bound changed in `wire` changes the schema, and this test names the text to change.
    #[test]
    fn the_tools_bounds_are_the_wire_types_and_their_descriptions_say_them() {
        let cases = [
            (
                property(schema_for!(SearchMemories), "top_k"),
                (json!(MIN_TOP_K), json!(MAX_TOP_K)),
                format!("{MIN_TOP_K} to {MAX_TOP_K} (default {DEFAULT_TOP_K})"),
            ),
            (
                property(schema_for!(GetMemories), "page_size"),
                (json!(MIN_PAGE), json!(MAX_PAGE_SIZE)),
                format!("{MIN_PAGE} to {MAX_PAGE_SIZE} (default {MEMORY_PAGE_SIZE})"),
            ),
            (
                property(schema_for!(GetMemories), "page"),
                (json!(MIN_PAGE), Value::Null),
                format!("From {MIN_PAGE}"),
            ),
            (
                property(schema_for!(ListAuditLogs), "page_size"),
                (json!(MIN_PAGE), json!(MAX_PAGE_SIZE)),
                format!("{MIN_PAGE} to {MAX_PAGE_SIZE} (default {AUDIT_PAGE_SIZE})"),
            ),
            (
                property(schema_for!(ListAuditLogs), "page"),
                (json!(MIN_PAGE), Value::Null),
                format!("From {MIN_PAGE}"),
            ),
            (
                property(schema_for!(AddMemory), "importance"),
                (json!(MIN_IMPORTANCE), json!(MAX_IMPORTANCE)),
                format!("{MIN_IMPORTANCE} to {MAX_IMPORTANCE}"),
            ),
            (
                property(schema_for!(UpdateMemory), "importance"),
                (json!(MIN_IMPORTANCE), json!(MAX_IMPORTANCE)),
                format!("{MIN_IMPORTANCE} to {MAX_IMPORTANCE}"),
            ),
            (
                property(schema_for!(ProveAuditLog), "tree_size"),
                (json!(MIN_PROVEN_SIZE), Value::Null),
                String::new(),
            ),
        ];
        for ((min, max, text), want, says) in cases {
            assert_eq!((min, max), want, "{text}");
            assert!(text.contains(&says), "{text:?} should say {says:?}");
        }
    }
}
