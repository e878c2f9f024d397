//! The delivery loop. A supervisor starts one task per enabled endpoint (and ends it when the
//! endpoint is deleted or disabled); each task sends its endpoint's events one at a time, in
//! log order, so an endpoint's order holds and one endpoint's failures or slowness touch no
//! other: a request holds one of `--webhook-concurrency` permits for at most
//! `--webhook-timeout-ms`, and waits between retries hold none.
//!
//! Each attempt is recorded as a `WebhookAttempted` before the next is made, appended under a
//! precondition that the endpoint's state is still the one the attempt was decided on: a
//! second deliverer of the same endpoint has its record refused and reads the state again
//! instead of moving the cursor twice.
//!
//! **On a cluster** one node delivers at a time: the holder of a lease recorded in the log
//! (`WebhookLeaseTaken`, [`LEASE`] long, renewed every few seconds, taken under a
//! precondition that it is as read). Another node takes it once it ran out: a killed holder's
//! endpoints go on from their cursors after at most [`LEASE`]. No lease is taken, and nothing
//! is written, while no endpoint is enabled.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use auditmem_projections::event::{Event, WebhookAttempted};
use auditmem_projections::seal::{Sealed, Subject};
use auditmem_projections::webhooks::WebhookEndpoint;
use auditmem_projections::Projections;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinHandle;
use uuid::Uuid;

use super::events::{self, Message, Scan};
use super::{sign, target};
use crate::api::state::AppState;
use crate::command::webhook::{excerpt_aad, secret_aad};
use crate::log::appender::{AppendError, Precondition, Rejection};
use crate::registry::ErrorCode;

/// Most bytes of an answer's body kept in the delivery log.
pub const EXCERPT_BYTES: usize = 1024;
/// Most positions one scan for an endpoint's next event takes from each of its tenant's
/// log-order lists (its audit entries, its other webhook events).
const MAX_SCAN: usize = 4096;
/// How often the supervisor looks for new, changed or deleted endpoints.
const SUPERVISE_EVERY: Duration = Duration::from_millis(250);

/// How long a cluster node's delivery lease lasts.
pub const LEASE: Duration = Duration::from_secs(15);
/// A holder renews its lease when less than this is left.
const RENEW_WITHIN: Duration = Duration::from_secs(10);

/// Runs until `stop` turns true.
pub async fn run(state: AppState, mut stop: watch::Receiver<bool>) {
    let permits = Arc::new(Semaphore::new(state.webhooks.concurrency.max(1)));
    let mut tasks: HashMap<(Uuid, Uuid), JoinHandle<()>> = HashMap::new();
    let node = Uuid::now_v7();
    loop {
        tasks.retain(|_, t| !t.is_finished());
        let endpoints = state.projections.tenants.all_webhooks();
        let delivers = match &endpoints {
            Ok(e) if state.webhooks.clustered && e.iter().any(|e| e.enabled) => {
                holds_lease(&state, node).await
            }
            _ => true,
        };
        if !delivers {
            for (_, t) in tasks.drain() {
                t.abort();
            }
        }
        match endpoints.map(|e| if delivers { e } else { Vec::new() }) {
            Ok(endpoints) => {
                for e in endpoints.into_iter().filter(|e| e.enabled) {
                    let key = (e.tenant_id, e.endpoint_id);
                    tasks.entry(key).or_insert_with(|| {
                        tokio::spawn(endpoint_loop(state.clone(), key.0, key.1, permits.clone()))
                    });
                }
            }
            Err(e) => tracing::warn!(error = %e, "reading the webhook endpoints"),
        }
        tokio::select! {
            _ = tokio::time::sleep(SUPERVISE_EVERY) => {}
            _ = stop.changed() => break,
        }
    }
    for (_, t) in tasks {
        t.abort();
    }
}

/// Whether this node holds the cluster's delivery lease, after taking it if it is free or
/// renewing it if it is this node's and running out. The lease is taken under a precondition
/// that it is still as read, so two nodes never both take it; a node whose renewal cannot be
/// recorded stops delivering when its lease ends.
async fn holds_lease(state: &AppState, node: Uuid) -> bool {
    let now = crate::wire::time::now();
    let read = match state.projections.tenants.webhook_lease() {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "reading the webhook lease");
            return false;
        }
    };
    let micros = |d: Duration| i64::try_from(d.as_micros()).unwrap_or(i64::MAX / 4);
    let mine = read
        .as_ref()
        .is_some_and(|l| l.node_id == node && l.until > now);
    let free = read.as_ref().is_none_or(|l| l.until <= now);
    let renew = mine
        && read
            .as_ref()
            .is_some_and(|l| l.until - now < micros(RENEW_WITHIN));
    if !(free || renew) {
        return mine;
    }
    let event = Event::WebhookLeaseTaken(auditmem_projections::event::WebhookLeaseTaken {
        node_id: node,
        until: now + micros(LEASE),
        at: now,
    });
    let expected = read.clone();
    let check: Precondition = Box::new(move |p: &Projections| match p.tenants.webhook_lease() {
        Ok(l) if l == expected => Ok(()),
        _ => Err(Rejection {
            code: ErrorCode::Conflict,
            message: "another node took the webhook lease".into(),
            retry_after: None,
        }),
    });
    match state.appender.append_checked(vec![event], check).await {
        Ok(_) => true,
        Err(e) => {
            tracing::debug!(error = %e, "the webhook lease was not taken");
            mine
        }
    }
}

/// The endpoint as it stands, if it is still there and enabled.
fn current(projections: &Projections, tenant: Uuid, id: Uuid) -> Option<WebhookEndpoint> {
    match projections.tenants.webhook(&tenant, &id) {
        Ok(Some(e)) if e.enabled => Some(e),
        Ok(_) => None,
        Err(e) => {
            tracing::warn!(error = %e, endpoint = %id, "reading a webhook endpoint");
            None
        }
    }
}

/// What the next step of an endpoint's loop is.
enum Next {
    /// Send this message, as this delivery's `attempt`-th attempt.
    Send {
        message: Message,
        delivery_id: Uuid,
        attempt: u32,
        redelivery: bool,
    },
    /// Nothing to do before this long (or before the log moves).
    Wait(Duration),
}

async fn endpoint_loop(state: AppState, tenant: Uuid, id: Uuid, permits: Arc<Semaphore>) {
    let mut head = state.appender.subscribe();
    // Every event of the tenant between the cursor and here is one the endpoint is not sent:
    // kept only in memory, it spares rescanning them.
    let mut scanned = 0u64;
    let mut seen_version = None;
    loop {
        let Some(endpoint) = current(&state.projections, tenant, id) else {
            return;
        };
        // A change (its event types, its filter) may want events passed over before it.
        if seen_version != Some(endpoint.updated_at) {
            seen_version = Some(endpoint.updated_at);
            scanned = 0;
        }
        let next = match decide(&state, &endpoint, &mut scanned).await {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, endpoint = %id, "reading a webhook's next event");
                Next::Wait(Duration::from_secs(1))
            }
        };
        match next {
            Next::Wait(d) => {
                tokio::select! {
                    _ = tokio::time::sleep(d) => {}
                    _ = head.changed() => {}
                }
            }
            Next::Send {
                message,
                delivery_id,
                attempt,
                redelivery,
            } => {
                let outcome = {
                    let Ok(_permit) = permits.acquire().await else {
                        return;
                    };
                    send(&state, &endpoint, &message).await
                };
                record(
                    &state,
                    &endpoint,
                    message,
                    delivery_id,
                    attempt,
                    redelivery,
                    outcome,
                )
                .await;
            }
        }
    }
}

async fn decide(
    state: &AppState,
    endpoint: &WebhookEndpoint,
    scanned: &mut u64,
) -> Result<Next, String> {
    let now = crate::wire::time::now();
    if let Some(&delivery_id) = endpoint.redeliveries.first() {
        let d = state
            .projections
            .tenants
            .webhook_delivery(&endpoint.tenant_id, &endpoint.endpoint_id, &delivery_id)
            .map_err(|e| e.to_string())?
            .ok_or("a redelivery without its delivery")?;
        let s = state.clone();
        let tenant = endpoint.tenant_id;
        let message = blocking(move || events::at(&s, tenant, d.position)).await?;
        return Ok(match message {
            Some(message) => Next::Send {
                message,
                delivery_id,
                attempt: d.attempts + 1,
                redelivery: true,
            },
            None => Next::Wait(Duration::from_secs(1)),
        });
    }
    if let Some(r) = &endpoint.retrying {
        if r.next_try > now {
            let wait = u64::try_from(r.next_try - now).unwrap_or(0);
            return Ok(Next::Wait(
                Duration::from_micros(wait).min(Duration::from_secs(1)),
            ));
        }
        let s = state.clone();
        let (tenant, position) = (endpoint.tenant_id, r.position);
        let message = blocking(move || events::at(&s, tenant, position)).await?;
        return Ok(match message {
            Some(message) => Next::Send {
                message,
                delivery_id: r.delivery_id,
                attempt: r.attempts + 1,
                redelivery: false,
            },
            None => Next::Wait(Duration::from_secs(1)),
        });
    }
    let head = state.appender.head().seq;
    let after = endpoint.cursor.max(*scanned);
    if after >= head {
        return Ok(Next::Wait(Duration::from_secs(1)));
    }
    let s = state.clone();
    let e = endpoint.clone();
    match blocking(move || events::next(&s, &e, after, head, MAX_SCAN)).await? {
        Scan::Found(message) => {
            *scanned = message.position - 1;
            Ok(Next::Send {
                message,
                delivery_id: Uuid::now_v7(),
                attempt: 1,
                redelivery: false,
            })
        }
        Scan::Reached(reached) => {
            *scanned = reached;
            Ok(Next::Wait(if reached < head {
                Duration::ZERO
            } else {
                Duration::from_secs(1)
            }))
        }
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| format!("a webhook read: {e}"))?
}

/// How an attempt ended.
struct Outcome {
    status: Option<u16>,
    excerpt: Option<String>,
    error: Option<String>,
}

/// The endpoint's signing secrets (HMAC keys or Ed25519 seeds) now: the current one, and the
/// one before a rotation while its overlap lasts.
fn secrets(state: &AppState, endpoint: &WebhookEndpoint) -> Result<Vec<Vec<u8>>, String> {
    let aad = secret_aad(&endpoint.endpoint_id);
    let keys = &*state.projections.keys;
    let open = |s: &auditmem_projections::seal::Sealed| {
        s.open_with(keys, &aad)
            .map_err(|e| e.to_string())?
            .map(|z| z.to_vec())
            .ok_or_else(|| "the endpoint's secret was erased".to_string())
    };
    let mut out = vec![open(&endpoint.secret)?];
    if let (Some(prev), Some(until)) = (&endpoint.previous_secret, endpoint.previous_until) {
        if until > crate::wire::time::now() {
            out.push(open(prev)?);
        }
    }
    Ok(out)
}

/// The answer's excerpt sealed under the tenant's key; `None` (the attempt still recorded)
/// when the key store cannot seal it now.
fn seal_excerpt(
    state: &AppState,
    endpoint: &WebhookEndpoint,
    delivery: Uuid,
    excerpt: &str,
) -> Option<Sealed> {
    Sealed::seal_for(
        &*state.projections.keys,
        &[Subject::Tenant(endpoint.tenant_id)],
        &excerpt_aad(&endpoint.endpoint_id, &delivery),
        excerpt.as_bytes(),
    )
    .map_err(|e| tracing::warn!(error = %e, endpoint = %endpoint.endpoint_id, "sealing a webhook answer's excerpt"))
    .ok()
}

/// The `webhook-id` of a message: the same for every attempt and redelivery of it.
pub fn message_id(endpoint: Uuid, position: u64) -> String {
    format!("msg_{}_{position}", endpoint.simple())
}

async fn send(state: &AppState, endpoint: &WebhookEndpoint, message: &Message) -> Outcome {
    let failed = |error: String| Outcome {
        status: None,
        excerpt: None,
        error: Some(error),
    };
    let settings = &state.webhooks;
    let (url, addrs) = match target::resolve(&endpoint.url, settings.allow_private).await {
        Ok(t) => t,
        Err(e) => return failed(format!("refused target: {e}")),
    };
    let secrets = match secrets(state, endpoint) {
        Ok(s) => s,
        Err(e) => return failed(e),
    };
    let host = url.host_str().unwrap_or_default().to_owned();
    let client = match reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(settings.timeout)
        .connect_timeout(settings.timeout)
        .resolve_to_addrs(&host, &addrs)
        .build()
    {
        Ok(c) => c,
        Err(e) => return failed(format!("building the HTTP client: {e}")),
    };
    let id = message_id(endpoint.endpoint_id, message.position);
    let timestamp = chrono::Utc::now().timestamp();
    let refs: Vec<&[u8]> = secrets.iter().map(Vec::as_slice).collect();
    let signature = match sign::header_for(endpoint.scheme, &refs, &id, timestamp, &message.body) {
        Ok(s) => s,
        Err(e) => return failed(e),
    };
    let sent = client
        .post(url)
        .header("content-type", "application/json")
        .header(
            "user-agent",
            concat!("auditmem-webhooks/", env!("CARGO_PKG_VERSION")),
        )
        .header("webhook-id", &id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature)
        .body(message.body.clone())
        .send()
        .await;
    let mut response = match sent {
        Ok(r) => r,
        Err(e) => return failed(crate::http_client::chain(&e)),
    };
    let status = response.status().as_u16();
    let mut excerpt = Vec::new();
    let read = tokio::time::timeout(settings.timeout, async {
        while excerpt.len() < EXCERPT_BYTES {
            match response.chunk().await {
                Ok(Some(chunk)) => excerpt.extend_from_slice(&chunk),
                _ => break,
            }
        }
    })
    .await;
    drop(read);
    excerpt.truncate(EXCERPT_BYTES);
    Outcome {
        status: Some(status),
        excerpt: Some(String::from_utf8_lossy(&excerpt).into_owned()),
        error: None,
    }
}

/// The precondition of an attempt's record: the endpoint still stands where the attempt was
/// decided.
fn unchanged(endpoint: &WebhookEndpoint, redelivery: Option<Uuid>) -> Precondition {
    let (tenant, id) = (endpoint.tenant_id, endpoint.endpoint_id);
    let (cursor, retrying) = (endpoint.cursor, endpoint.retrying.clone());
    Box::new(move |p: &Projections| {
        let now = p.tenants.webhook(&tenant, &id).ok().flatten();
        let same = match (&now, redelivery) {
            (Some(e), Some(d)) => e.redeliveries.first() == Some(&d),
            (Some(e), None) => e.cursor == cursor && e.retrying == retrying,
            (None, _) => false,
        };
        if same {
            Ok(())
        } else {
            Err(Rejection {
                code: ErrorCode::Conflict,
                message: "the webhook changed since the attempt was decided".into(),
                retry_after: None,
            })
        }
    })
}

#[allow(clippy::too_many_arguments)]
async fn record(
    state: &AppState,
    endpoint: &WebhookEndpoint,
    message: Message,
    delivery_id: Uuid,
    attempt: u32,
    redelivery: bool,
    outcome: Outcome,
) {
    let now = crate::wire::time::now();
    let delivered = outcome.status.is_some_and(|s| (200..300).contains(&s));
    let gone = outcome.status == Some(410);
    let next_try = if delivered || gone || redelivery {
        None
    } else {
        state
            .webhooks
            .retry_after(attempt)
            .map(|d| now + i64::try_from(d.as_micros()).unwrap_or(i64::MAX / 2))
    };
    let event = Event::WebhookAttempted(Box::new(WebhookAttempted {
        tenant_id: endpoint.tenant_id,
        endpoint_id: endpoint.endpoint_id,
        delivery_id,
        position: message.position,
        event_type: message.event_type.to_owned(),
        attempt,
        delivered,
        response_status: outcome.status,
        response_excerpt: outcome
            .excerpt
            .and_then(|x| seal_excerpt(state, endpoint, delivery_id, &x)),
        error: outcome.error,
        next_try,
        disable: gone.then(|| "the endpoint answered 410 Gone".to_owned()),
        redelivery,
        at: now,
    }));
    let check = unchanged(endpoint, redelivery.then_some(delivery_id));
    match state.appender.append_checked(vec![event], check).await {
        Ok(_) => {}
        Err(AppendError::Rejected(r)) => {
            tracing::debug!(reason = %r.message, endpoint = %endpoint.endpoint_id, "webhook attempt not recorded")
        }
        // Not recorded: the event is sent again, which at-least-once allows.
        Err(e) => {
            tracing::warn!(error = %e, endpoint = %endpoint.endpoint_id, "recording a webhook attempt");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}
