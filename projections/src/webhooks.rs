//! Webhook endpoints and their deliveries, folded from the webhook events into the tenants
//! tree (`proj_tenants`): `w|tenant|endpoint` → [`WebhookEndpoint`],
//! `d|tenant|endpoint|delivery` → [`WebhookDelivery`], `l` → the cluster's [`WebhookLease`],
//! and each endpoint's settled deliveries in the order they settled: `r|tenant|endpoint` →
//! [`SettledRing`], `s|tenant|endpoint|n` → the delivery id settled `n`-th.
//!
//! **The cursor.** An endpoint's `cursor` is the log position up to which every event of its
//! tenant was delivered or given up on: it starts at the position of the event that created
//! the endpoint, and only a `WebhookAttempted` that delivered (or made the last try) of the
//! event after it moves it, to that event's position. The log is the outbox: what is past the
//! cursor is still to be sent, so nothing is lost by a restart, and every node of a cluster
//! agrees on it.
//!
//! **The delivery log is bounded.** An endpoint keeps every delivery still `pending` (the one
//! being retried at its cursor and each redelivery asked by hand and not yet attempted), and
//! its most recently settled ones (`delivered` or `failed`) up to [`DELIVERY_LOG_KEPT`]
//! deliveries in all; an older settled one is removed as a newer one settles or a new one is
//! pending. Deleting the endpoint removes all of its deliveries. The pruning is folded from the
//! events alone, through the overlay, so a replay, a restart or another batching of the same
//! events keeps exactly the same deliveries.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::event::{
    Event, SignatureScheme, WebhookAttempted, WebhookDeleted, WebhookRedeliveryRequested,
    WebhookSaved,
};
use crate::overlay::{prefixed, Overlay};
use crate::projection::{corrupt, Applied, Result};
use crate::seal::Sealed;
use crate::tenants::{dec, enc, Tenants, TREE};

/// The delivery an endpoint is retrying at its cursor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Retrying {
    pub delivery_id: Uuid,
    pub position: u64,
    pub attempts: u32,
    pub next_try: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WebhookEndpoint {
    pub tenant_id: Uuid,
    pub endpoint_id: Uuid,
    pub url: String,
    pub event_types: Vec<String>,
    pub audit_actions: Vec<String>,
    pub enabled: bool,
    pub disabled_reason: Option<String>,
    pub secret: Sealed,
    pub previous_secret: Option<Sealed>,
    pub previous_until: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
    /// Every event up to this log position is done with.
    pub cursor: u64,
    /// The delivery of the event after the cursor, while it is being retried.
    pub retrying: Option<Retrying>,
    /// Redeliveries asked by hand and not yet attempted, oldest first.
    pub redeliveries: Vec<Uuid>,
    /// As `WebhookSaved` has them (defaulted for endpoints folded before they existed).
    #[serde(default)]
    pub scheme: SignatureScheme,
    #[serde(default)]
    pub public_key: Option<String>,
    #[serde(default)]
    pub previous_public_key: Option<String>,
}

/// One delivery: an event sent (or to be sent) to an endpoint, with its attempts so far.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WebhookDelivery {
    pub delivery_id: Uuid,
    pub tenant_id: Uuid,
    pub endpoint_id: Uuid,
    pub position: u64,
    pub event_type: String,
    /// `pending`, `delivered` or `failed`.
    pub status: String,
    pub attempts: u32,
    pub response_status: Option<u16>,
    pub response_excerpt: Option<Sealed>,
    pub error: Option<String>,
    pub next_try: Option<i64>,
    /// The delivery this one sends again, for a redelivery.
    pub redelivery_of: Option<Uuid>,
    pub created_at: i64,
    pub updated_at: i64,
}

/// Who delivers on a cluster, and until when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookLease {
    pub node_id: Uuid,
    pub until: i64,
}

/// Most deliveries an endpoint's log keeps, pending ones first: what
/// `GET /v1/webhooks/{id}/deliveries` shows, so no delivery a tenant can see (or name in a
/// redelivery) is removed, and an endpoint's log costs at most this many records (each a few
/// hundred bytes, at most ~1.5 KB with a sealed answer excerpt) however busy it is. Pending
/// deliveries are kept beyond it: one is being retried (at most one per endpoint) or was asked
/// for by hand.
pub const DELIVERY_LOG_KEPT: usize = 100;

/// An endpoint's settled deliveries still kept: the `n`-th settled is at `s|tenant|endpoint|n`
/// for `first <= n < next`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettledRing {
    pub first: u64,
    pub next: u64,
}

const LEASE_KEY: &[u8] = b"l";

fn endpoint_key(tenant: &Uuid, endpoint: &Uuid) -> Vec<u8> {
    prefixed(b'w', &[tenant.as_bytes(), endpoint.as_bytes()])
}

fn delivery_key(tenant: &Uuid, endpoint: &Uuid, delivery: &Uuid) -> Vec<u8> {
    prefixed(
        b'd',
        &[tenant.as_bytes(), endpoint.as_bytes(), delivery.as_bytes()],
    )
}

fn ring_key(tenant: &Uuid, endpoint: &Uuid) -> Vec<u8> {
    prefixed(b'r', &[tenant.as_bytes(), endpoint.as_bytes()])
}

fn settled_key(tenant: &Uuid, endpoint: &Uuid, n: u64) -> Vec<u8> {
    prefixed(
        b's',
        &[tenant.as_bytes(), endpoint.as_bytes(), &n.to_be_bytes()],
    )
}

impl Tenants {
    /// The cluster's delivery lease, if a node ever took it.
    pub fn webhook_lease(&self) -> Result<Option<WebhookLease>> {
        self.tree
            .get(LEASE_KEY)?
            .map(|v| dec(&v, "webhook lease"))
            .transpose()
    }

    pub fn webhook(&self, tenant: &Uuid, endpoint: &Uuid) -> Result<Option<WebhookEndpoint>> {
        self.tree
            .get(endpoint_key(tenant, endpoint))?
            .map(|v| dec(&v, "webhook"))
            .transpose()
    }

    /// A tenant's endpoints, oldest first (ids are uuid v7).
    pub fn webhooks_of(&self, tenant: &Uuid) -> Result<Vec<WebhookEndpoint>> {
        self.tree
            .scan_prefix(prefixed(b'w', &[tenant.as_bytes()]))
            .map(|kv| dec(&kv?.1, "webhook"))
            .collect()
    }

    /// Every tenant's endpoints.
    pub fn all_webhooks(&self) -> Result<Vec<WebhookEndpoint>> {
        self.tree
            .scan_prefix([b'w'])
            .map(|kv| dec(&kv?.1, "webhook"))
            .collect()
    }

    pub fn webhook_delivery(
        &self,
        tenant: &Uuid,
        endpoint: &Uuid,
        delivery: &Uuid,
    ) -> Result<Option<WebhookDelivery>> {
        self.tree
            .get(delivery_key(tenant, endpoint, delivery))?
            .map(|v| dec(&v, "webhook delivery"))
            .transpose()
    }

    /// An endpoint's deliveries, newest first, at most `limit`.
    pub fn webhook_deliveries(
        &self,
        tenant: &Uuid,
        endpoint: &Uuid,
        limit: usize,
    ) -> Result<Vec<WebhookDelivery>> {
        self.tree
            .scan_prefix(prefixed(b'd', &[tenant.as_bytes(), endpoint.as_bytes()]))
            .rev()
            .take(limit)
            .map(|kv| dec(&kv?.1, "webhook delivery"))
            .collect()
    }
}

/// Folds a webhook event; any other event changes nothing here.
pub(crate) fn fold(ov: &mut Overlay<'_>, applied: &Applied<'_>) -> Result<()> {
    match applied.event {
        Event::WebhookSaved(e) => saved(ov, e, applied.seq),
        Event::WebhookDeleted(e) => deleted(ov, e),
        Event::WebhookAttempted(e) => attempted(ov, e),
        Event::WebhookRedeliveryRequested(e) => redelivery(ov, e),
        Event::WebhookLeaseTaken(e) => {
            let lease = WebhookLease {
                node_id: e.node_id,
                until: e.until,
            };
            ov.insert(LEASE_KEY.to_vec(), enc(&lease));
            Ok(())
        }
        _ => Ok(()),
    }
}

fn saved(ov: &mut Overlay<'_>, e: &WebhookSaved, seq: u64) -> Result<()> {
    let key = endpoint_key(&e.tenant_id, &e.endpoint_id);
    let before: Option<WebhookEndpoint> = ov.get(&key)?.map(|v| dec(&v, "webhook")).transpose()?;
    let (cursor, retrying, redeliveries) = match before {
        Some(b) => (b.cursor, b.retrying, b.redeliveries),
        None => {
            ov.insert(
                ring_key(&e.tenant_id, &e.endpoint_id),
                enc(&SettledRing::default()),
            );
            (seq, None, Vec::new())
        }
    };
    let endpoint = WebhookEndpoint {
        tenant_id: e.tenant_id,
        endpoint_id: e.endpoint_id,
        url: e.url.clone(),
        event_types: e.event_types.clone(),
        audit_actions: e.audit_actions.clone(),
        enabled: e.enabled,
        disabled_reason: e.disabled_reason.clone(),
        secret: e.secret.clone(),
        previous_secret: e.previous_secret.clone(),
        previous_until: e.previous_until,
        created_at: e.created_at,
        updated_at: e.updated_at,
        cursor,
        retrying,
        redeliveries,
        scheme: e.scheme,
        public_key: e.public_key.clone(),
        previous_public_key: e.previous_public_key.clone(),
    };
    ov.insert(key, enc(&endpoint));
    Ok(())
}

fn deleted(ov: &mut Overlay<'_>, e: &WebhookDeleted) -> Result<()> {
    let (t, id) = (e.tenant_id.as_bytes(), e.endpoint_id.as_bytes());
    for prefix in [b'd', b's'] {
        for key in ov.keys_with_prefix(&prefixed(prefix, &[t, id]))? {
            ov.remove(key);
        }
    }
    ov.remove(ring_key(&e.tenant_id, &e.endpoint_id));
    ov.remove(endpoint_key(&e.tenant_id, &e.endpoint_id));
    Ok(())
}

/// The endpoint's ring of settled deliveries. An endpoint folded before the ring existed has
/// none: its settled deliveries are taken into one, in id (creation) order, the first time it
/// is needed, so the bound reaches them too. Read before the event being folded writes its
/// delivery, so that delivery is never taken twice.
fn ring_of(ov: &mut Overlay<'_>, tenant: &Uuid, endpoint: &Uuid) -> Result<SettledRing> {
    if let Some(bytes) = ov.get(&ring_key(tenant, endpoint))? {
        return dec(&bytes, "webhook settled ring");
    }
    let mut keys =
        ov.keys_with_prefix(&prefixed(b'd', &[tenant.as_bytes(), endpoint.as_bytes()]))?;
    keys.sort();
    let mut ring = SettledRing::default();
    for key in keys {
        let Some(bytes) = ov.get(&key)? else { continue };
        let d: WebhookDelivery = dec(&bytes, "webhook delivery")?;
        if d.status != "pending" {
            ov.insert(
                settled_key(tenant, endpoint, ring.next),
                d.delivery_id.as_bytes().to_vec(),
            );
            ring.next += 1;
        }
    }
    Ok(ring)
}

/// Records `settled` (a delivery that just settled) in the ring, then removes the oldest
/// settled deliveries while the endpoint keeps more than [`DELIVERY_LOG_KEPT`], counting its
/// pending ones, which are never removed.
fn bound(
    ov: &mut Overlay<'_>,
    endpoint: &WebhookEndpoint,
    mut ring: SettledRing,
    settled: Option<Uuid>,
) -> Result<()> {
    let (t, e) = (&endpoint.tenant_id, &endpoint.endpoint_id);
    if let Some(id) = settled {
        ov.insert(settled_key(t, e, ring.next), id.as_bytes().to_vec());
        ring.next += 1;
    }
    let pending = usize::from(endpoint.retrying.is_some()) + endpoint.redeliveries.len();
    let kept = |r: &SettledRing| usize::try_from(r.next - r.first).unwrap_or(usize::MAX);
    while ring.first < ring.next && kept(&ring).saturating_add(pending) > DELIVERY_LOG_KEPT {
        let key = settled_key(t, e, ring.first);
        if let Some(id) = ov.get(&key)? {
            let id = Uuid::from_slice(&id)
                .map_err(|err| corrupt(TREE, format!("settled webhook delivery id: {err}")))?;
            ov.remove(delivery_key(t, e, &id));
        }
        ov.remove(key);
        ring.first += 1;
    }
    ov.insert(ring_key(t, e), enc(&ring));
    Ok(())
}

fn attempted(ov: &mut Overlay<'_>, e: &WebhookAttempted) -> Result<()> {
    // A deleted endpoint's deliveries went with it.
    let key = endpoint_key(&e.tenant_id, &e.endpoint_id);
    let Some(bytes) = ov.get(&key)? else {
        return Ok(());
    };
    let mut endpoint: WebhookEndpoint = dec(&bytes, "webhook")?;
    let ring = ring_of(ov, &e.tenant_id, &e.endpoint_id)?;
    let dkey = delivery_key(&e.tenant_id, &e.endpoint_id, &e.delivery_id);
    let before: Option<WebhookDelivery> = ov
        .get(&dkey)?
        .map(|v| dec(&v, "webhook delivery"))
        .transpose()?;
    let status = if e.delivered {
        "delivered"
    } else if e.next_try.is_some() {
        "pending"
    } else {
        "failed"
    };
    let settles = status != "pending" && before.as_ref().is_none_or(|b| b.status == "pending");
    let delivery = WebhookDelivery {
        delivery_id: e.delivery_id,
        tenant_id: e.tenant_id,
        endpoint_id: e.endpoint_id,
        position: e.position,
        event_type: e.event_type.clone(),
        status: status.to_owned(),
        attempts: e.attempt,
        response_status: e.response_status,
        response_excerpt: e.response_excerpt.clone(),
        error: e.error.clone(),
        next_try: e.next_try,
        redelivery_of: before.as_ref().and_then(|b| b.redelivery_of),
        created_at: before.as_ref().map_or(e.at, |b| b.created_at),
        updated_at: e.at,
    };
    ov.insert(dkey, enc(&delivery));

    if e.redelivery {
        endpoint.redeliveries.retain(|d| *d != e.delivery_id);
    } else if e.position > endpoint.cursor {
        match e.next_try {
            Some(next_try) if !e.delivered => {
                endpoint.retrying = Some(Retrying {
                    delivery_id: e.delivery_id,
                    position: e.position,
                    attempts: e.attempt,
                    next_try,
                })
            }
            // A disabled endpoint starts again at this event when it is enabled again.
            _ if e.disable.is_some() => endpoint.retrying = None,
            _ => {
                endpoint.cursor = e.position;
                endpoint.retrying = None;
            }
        }
    }
    if let Some(reason) = &e.disable {
        endpoint.enabled = false;
        endpoint.disabled_reason = Some(reason.clone());
    }
    ov.insert(key, enc(&endpoint));
    bound(ov, &endpoint, ring, settles.then_some(e.delivery_id))
}

fn redelivery(ov: &mut Overlay<'_>, e: &WebhookRedeliveryRequested) -> Result<()> {
    let key = endpoint_key(&e.tenant_id, &e.endpoint_id);
    let Some(bytes) = ov.get(&key)? else {
        return Ok(());
    };
    let mut endpoint: WebhookEndpoint = dec(&bytes, "webhook")?;
    let ring = ring_of(ov, &e.tenant_id, &e.endpoint_id)?;
    endpoint.redeliveries.push(e.delivery_id);
    ov.insert(key, enc(&endpoint));
    let delivery = WebhookDelivery {
        delivery_id: e.delivery_id,
        tenant_id: e.tenant_id,
        endpoint_id: e.endpoint_id,
        position: e.position,
        event_type: e.event_type.clone(),
        status: "pending".to_owned(),
        attempts: 0,
        response_status: None,
        response_excerpt: None,
        error: None,
        next_try: Some(e.requested_at),
        redelivery_of: Some(e.of),
        created_at: e.requested_at,
        updated_at: e.requested_at,
    };
    ov.insert(
        delivery_key(&e.tenant_id, &e.endpoint_id, &e.delivery_id),
        enc(&delivery),
    );
    bound(ov, &endpoint, ring, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::WebhookLeaseTaken;
    use crate::projection::Projection;
    use crate::seal::{KeyId, SealKey};

    fn saved(tenant: Uuid, endpoint: Uuid) -> Event {
        let key = SealKey::from_bytes([7; 32]);
        Event::WebhookSaved(Box::new(WebhookSaved {
            tenant_id: tenant,
            endpoint_id: endpoint,
            url: "https://hooks.example/h".into(),
            event_types: vec!["audit.entry".into()],
            audit_actions: vec![],
            enabled: true,
            disabled_reason: None,
            secret: Sealed::seal(&key, &[KeyId::random()], b"aad", b"secret"),
            previous_secret: None,
            previous_until: None,
            created_at: 1,
            updated_at: 1,
            scheme: SignatureScheme::HmacSha256,
            public_key: None,
            previous_public_key: None,
        }))
    }

    fn attempt(tenant: Uuid, endpoint: Uuid, position: u64, n: u32, status: u16) -> Event {
        Event::WebhookAttempted(Box::new(WebhookAttempted {
            tenant_id: tenant,
            endpoint_id: endpoint,
            delivery_id: Uuid::from_u128(position as u128),
            position,
            event_type: "audit.entry".into(),
            attempt: n,
            delivered: (200..300).contains(&status),
            response_status: Some(status),
            response_excerpt: None,
            error: None,
            next_try: (status == 500).then_some(100),
            disable: (status == 410).then(|| "gone".to_owned()),
            redelivery: false,
            at: 2,
        }))
    }

    #[test]
    fn given_attempts_then_the_cursor_moves_only_past_what_was_done() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = sled::open(dir.path()).expect("open");
        let p = Tenants::open(&db).expect("open");
        let (t, e) = (Uuid::now_v7(), Uuid::now_v7());
        let events = [
            saved(t, e),
            attempt(t, e, 5, 1, 500),
            attempt(t, e, 5, 2, 200),
            attempt(t, e, 9, 1, 500),
        ];
        let applied: Vec<Applied<'_>> = events
            .iter()
            .enumerate()
            .map(|(i, ev)| Applied::at(i as u64 + 3, ev))
            .collect();
        p.apply(&applied).expect("apply");
        let w = p.webhook(&t, &e).expect("read").expect("endpoint");
        // Created at seq 3; 5 delivered on its second attempt; 9 failed once, to be retried.
        assert_eq!(w.cursor, 5);
        assert_eq!(
            w.retrying,
            Some(Retrying {
                delivery_id: Uuid::from_u128(9),
                position: 9,
                attempts: 1,
                next_try: 100,
            })
        );
        let d = p.webhook_deliveries(&t, &e, 10).expect("deliveries");
        let got: Vec<(u64, &str, u32)> = d
            .iter()
            .map(|d| (d.position, d.status.as_str(), d.attempts))
            .collect();
        assert_eq!(got, vec![(9, "pending", 1), (5, "delivered", 2)]);

        // A 410 disables it and leaves the cursor where it was.
        let gone = attempt(t, e, 9, 2, 410);
        p.apply(&[Applied::at(7, &gone)]).expect("apply");
        let w = p.webhook(&t, &e).expect("read").expect("endpoint");
        assert_eq!((w.cursor, w.enabled, w.retrying), (5, false, None));
        assert_eq!(w.disabled_reason.as_deref(), Some("gone"));

        // Another tenant sees nothing of it; the lease is one key.
        assert!(p.webhook(&Uuid::now_v7(), &e).expect("read").is_none());
        let lease = Event::WebhookLeaseTaken(WebhookLeaseTaken {
            node_id: e,
            until: 50,
            at: 1,
        });
        p.apply(&[Applied::at(8, &lease)]).expect("apply");
        assert_eq!(
            p.webhook_lease().expect("read"),
            Some(WebhookLease {
                node_id: e,
                until: 50
            })
        );
        assert_eq!(p.all_webhooks().expect("all").len(), 1);
    }

    fn redelivery_of(tenant: Uuid, endpoint: Uuid, of: u64, id: u128) -> Event {
        Event::WebhookRedeliveryRequested(WebhookRedeliveryRequested {
            tenant_id: tenant,
            endpoint_id: endpoint,
            delivery_id: Uuid::from_u128(id),
            of: Uuid::from_u128(of as u128),
            position: of,
            event_type: "audit.entry".into(),
            requested_at: 3,
        })
    }

    fn redelivered(tenant: Uuid, endpoint: Uuid, of: u64, id: u128) -> Event {
        let Event::WebhookAttempted(mut a) = attempt(tenant, endpoint, of, 1, 500) else {
            unreachable!("attempt() makes a WebhookAttempted")
        };
        a.delivery_id = Uuid::from_u128(id);
        a.redelivery = true;
        a.next_try = None;
        Event::WebhookAttempted(a)
    }

    /// Every key and value of the tree but the checkpoint.
    fn state(p: &Tenants) -> Vec<(Vec<u8>, Vec<u8>)> {
        p.tree
            .iter()
            .map(|kv| kv.expect("read"))
            .filter(|(k, _)| k.first() != Some(&0))
            .map(|(k, v)| (k.to_vec(), v.to_vec()))
            .collect()
    }

    fn open() -> (tempfile::TempDir, Tenants) {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = sled::open(dir.path()).expect("open");
        let p = Tenants::open(&db).expect("open");
        (dir, p)
    }

    /// 105 deliveries settle, one is retried, two redeliveries are asked, one attempted:
    /// every pending one stays, the oldest settled go, whatever the batches.
    fn bounded_run(t: Uuid, e: Uuid) -> Vec<Event> {
        let mut events = vec![saved(t, e)];
        // Positions 10..=114 delivered (their delivery ids are their positions).
        events.extend((10..115).map(|p| attempt(t, e, p, 1, 200)));
        // 115 fails once: pending, retried at its cursor.
        events.push(attempt(t, e, 115, 1, 500));
        events.push(redelivery_of(t, e, 50, 1_000));
        events.push(redelivery_of(t, e, 60, 1_001));
        // The first redelivery's one attempt fails: settled.
        events.push(redelivered(t, e, 50, 1_000));
        events
    }

    #[test]
    fn the_delivery_log_keeps_pending_ones_and_the_latest_settled_whatever_the_batches() {
        let (t, e) = (Uuid::now_v7(), Uuid::now_v7());
        let events = bounded_run(t, e);

        let (_one_dir, one) = open();
        let all: Vec<Applied<'_>> = events
            .iter()
            .enumerate()
            .map(|(i, ev)| Applied::at(i as u64 + 1, ev))
            .collect();
        one.apply(&all).expect("apply");

        let (_each_dir, each) = open();
        for a in &all {
            each.apply(std::slice::from_ref(a)).expect("apply");
        }
        assert_eq!(state(&one), state(&each));

        let kept = one
            .webhook_deliveries(&t, &e, usize::MAX)
            .expect("deliveries");
        assert_eq!(kept.len(), DELIVERY_LOG_KEPT);
        let got: Vec<(u128, &str)> = kept
            .iter()
            .map(|d| (d.delivery_id.as_u128(), d.status.as_str()))
            .collect();
        // Two pending (115 retried, 1001 asked) and 98 settled: the redelivery 1000 and the 97
        // deliveries settled last, 18..=114; 10..=17 are gone.
        let mut want = vec![(1_001, "pending"), (1_000, "failed"), (115, "pending")];
        want.extend((18..115).rev().map(|p| (p, "delivered")));
        assert_eq!(got, want);
        let ring: SettledRing = dec(
            &one.tree.get(ring_key(&t, &e)).expect("read").expect("ring"),
            "ring",
        )
        .expect("ring");
        assert_eq!(
            ring,
            SettledRing {
                first: 8,
                next: 106
            }
        );
    }

    #[test]
    fn deleting_an_endpoint_removes_its_deliveries_and_nothing_of_another() {
        let (t, e, other) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
        let mut events = bounded_run(t, e);
        events.push(saved(t, other));
        events.push(attempt(t, other, 200, 1, 200));
        let (_dir, p) = open();
        p.apply(&Applied::in_order(&events)).expect("apply");
        let other_before: Vec<_> = state(&p)
            .into_iter()
            .filter(|(k, _)| k.windows(16).any(|w| w == other.as_bytes()))
            .collect();
        assert_eq!(other_before.len(), 4, "endpoint, ring, delivery, settled");

        // Deleted in the same batch as attempts of it, and again from the tree alone.
        let (_dir2, q) = open();
        let mut with_delete = events.clone();
        with_delete.push(Event::WebhookDeleted(WebhookDeleted {
            tenant_id: t,
            endpoint_id: e,
            deleted_at: 4,
        }));
        // A late attempt of the deleted endpoint leaves nothing behind.
        with_delete.push(attempt(t, e, 116, 1, 200));
        q.apply(&Applied::in_order(&with_delete)).expect("apply");
        let n = events.len() as u64;
        let deleted = Event::WebhookDeleted(WebhookDeleted {
            tenant_id: t,
            endpoint_id: e,
            deleted_at: 4,
        });
        let late = attempt(t, e, 116, 1, 200);
        p.apply(&[Applied::at(n + 1, &deleted), Applied::at(n + 2, &late)])
            .expect("apply");
        assert_eq!(state(&p), other_before);
        assert_eq!(state(&q), other_before);
    }

    #[test]
    fn deliveries_folded_before_the_bound_are_taken_into_it() {
        let (t, e) = (Uuid::now_v7(), Uuid::now_v7());
        let (_dir, p) = open();
        let mut events = vec![saved(t, e)];
        events.extend((10..110).map(|p| attempt(t, e, p, 1, 200)));
        p.apply(&Applied::in_order(&events)).expect("apply");
        // As a tree folded before the ring existed holds them: deliveries, no ring.
        for (k, _) in state(&p) {
            if matches!(k.first(), Some(b'r' | b's')) {
                p.tree.remove(k).expect("remove");
            }
        }
        let more = [attempt(t, e, 110, 1, 200), attempt(t, e, 111, 1, 200)];
        let n = events.len() as u64;
        p.apply(&[Applied::at(n + 1, &more[0]), Applied::at(n + 2, &more[1])])
            .expect("apply");
        let kept: Vec<u128> = p
            .webhook_deliveries(&t, &e, usize::MAX)
            .expect("deliveries")
            .iter()
            .map(|d| d.delivery_id.as_u128())
            .collect();
        assert_eq!(kept, (12..112).rev().collect::<Vec<u128>>());
    }

    /// `WebhookSaved` as it was encoded before endpoints had a signature scheme.
    #[derive(Serialize)]
    struct WebhookSavedBeforeSchemes {
        tenant_id: Uuid,
        endpoint_id: Uuid,
        url: String,
        event_types: Vec<String>,
        audit_actions: Vec<String>,
        enabled: bool,
        disabled_reason: Option<String>,
        secret: Sealed,
        previous_secret: Option<Sealed>,
        previous_until: Option<i64>,
        created_at: i64,
        updated_at: i64,
    }

    #[test]
    fn an_event_from_before_schemes_folds_as_hmac_and_replays_the_same() {
        let (t, e) = (Uuid::now_v7(), Uuid::now_v7());
        let Event::WebhookSaved(now) = saved(t, e) else {
            unreachable!("saved() makes a WebhookSaved")
        };
        let old = WebhookSavedBeforeSchemes {
            tenant_id: now.tenant_id,
            endpoint_id: now.endpoint_id,
            url: now.url.clone(),
            event_types: now.event_types.clone(),
            audit_actions: now.audit_actions.clone(),
            enabled: now.enabled,
            disabled_reason: None,
            secret: now.secret.clone(),
            previous_secret: None,
            previous_until: None,
            created_at: now.created_at,
            updated_at: now.updated_at,
        };
        let mut tagged = std::collections::BTreeMap::new();
        tagged.insert("WebhookSaved", old);
        let bytes =
            rmp_serde::to_vec(&(crate::event::EVENT_FORMAT_VERSION, tagged)).expect("encode");
        let decoded = Event::decode(&bytes).expect("an old WebhookSaved decodes");
        let Event::WebhookSaved(got) = &decoded else {
            panic!("{decoded:?}")
        };
        assert_eq!(got.scheme, SignatureScheme::HmacSha256);
        assert_eq!((&got.public_key, &got.previous_public_key), (&None, &None));
        assert_eq!(**got, *now);

        // Folded twice from scratch (a replay), the old event gives the same HMAC endpoint.
        let fold_once = |ev: &Event| {
            let dir = tempfile::tempdir().expect("tempdir");
            let db = sled::open(dir.path()).expect("open");
            let p = Tenants::open(&db).expect("open");
            p.apply(&[Applied::at(3, ev)]).expect("apply");
            p.webhook(&t, &e).expect("read").expect("endpoint")
        };
        let first = fold_once(&decoded);
        assert_eq!(first, fold_once(&Event::decode(&bytes).expect("decode")));
        assert_eq!(first.scheme, SignatureScheme::HmacSha256);
        assert_eq!(first.public_key, None);

        // An Ed25519 endpoint's fields survive the event's round trip.
        let mut ed = (*now).clone();
        ed.scheme = SignatureScheme::Ed25519;
        ed.public_key = Some("whpk_new".into());
        ed.previous_public_key = Some("whpk_old".into());
        let ev = Event::WebhookSaved(Box::new(ed));
        let back = Event::decode(&ev.encode().expect("encode")).expect("decode");
        assert_eq!(back, ev);
        let folded = fold_once(&back);
        assert_eq!(folded.scheme, SignatureScheme::Ed25519);
        assert_eq!(folded.public_key.as_deref(), Some("whpk_new"));
        assert_eq!(folded.previous_public_key.as_deref(), Some("whpk_old"));
    }
}
