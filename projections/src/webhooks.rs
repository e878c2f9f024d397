//! Webhook endpoints and their deliveries, folded from the webhook events into the tenants
//! tree (`proj_tenants`): `w|tenant|endpoint` → [`WebhookEndpoint`],
//! `d|tenant|endpoint|delivery` → [`WebhookDelivery`], `l` → the cluster's [`WebhookLease`].
//!
//! **The cursor.** An endpoint's `cursor` is the log position up to which every event of its
//! tenant was delivered or given up on: it starts at the position of the event that created
//! the endpoint, and only a `WebhookAttempted` that delivered (or made the last try) of the
//! event after it moves it, to that event's position. The log is the outbox: what is past the
//! cursor is still to be sent, so nothing is lost by a restart, and every node of a cluster
//! agrees on it.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::event::{
    Event, SignatureScheme, WebhookAttempted, WebhookDeleted, WebhookRedeliveryRequested,
    WebhookSaved,
};
use crate::overlay::{prefixed, Overlay};
use crate::projection::{Applied, Result};
use crate::seal::Sealed;
use crate::tenants::{dec, enc, Tenants};

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
        None => (seq, None, Vec::new()),
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
    // The deliveries stay, unreachable through the API: the overlay folds by key, and the
    // deleted endpoint's id is never reused.
    ov.remove(endpoint_key(&e.tenant_id, &e.endpoint_id));
    Ok(())
}

fn attempted(ov: &mut Overlay<'_>, e: &WebhookAttempted) -> Result<()> {
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

    let key = endpoint_key(&e.tenant_id, &e.endpoint_id);
    let Some(bytes) = ov.get(&key)? else {
        return Ok(());
    };
    let mut endpoint: WebhookEndpoint = dec(&bytes, "webhook")?;
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
    Ok(())
}

fn redelivery(ov: &mut Overlay<'_>, e: &WebhookRedeliveryRequested) -> Result<()> {
    let key = endpoint_key(&e.tenant_id, &e.endpoint_id);
    let Some(bytes) = ov.get(&key)? else {
        return Ok(());
    };
    let mut endpoint: WebhookEndpoint = dec(&bytes, "webhook")?;
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
    Ok(())
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
