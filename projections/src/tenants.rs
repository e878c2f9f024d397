//! Tenants and API keys, folded from `TenantCreated`, `TenantUpdated`, `KeyIssued`, `KeyRevoked`,
//! and their webhook endpoints (`crate::webhooks`, in the same tree).
//!
//! Tree `proj_tenants`: `t|tenant_id` → tenant, `k|key_hash` → key, `i|key_id` → key_hash,
//! `w|tenant_id|endpoint_id` → webhook endpoint, `d|tenant_id|endpoint_id|delivery_id` →
//! webhook delivery, `r|...` and `s|...` → which deliveries settled in which order
//! (`crate::webhooks`).
//! A key is looked up by the blake3 hash of what the client presents; the key itself is never
//! known to this projection.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::event::{Event, Permission, Plan};
use crate::overlay::{fold_new, prefixed, Overlay};
use crate::projection::{corrupt, Applied, Projection, Result};

pub const TREE: &str = "proj_tenants";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tenant {
    pub id: Uuid,
    pub name: String,
    pub plan: Plan,
    pub subscription_active: bool,
    pub credits: f64,
    pub created_at: i64,
    pub updated_at: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApiKey {
    pub key_id: Uuid,
    pub tenant_id: Uuid,
    pub permissions: Vec<Permission>,
    pub name: Option<String>,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
    /// `KeyIssued::scope`.
    #[serde(default)]
    pub scope: Option<crate::event::KeyScope>,
}

impl ApiKey {
    pub fn has(&self, p: Permission) -> bool {
        self.permissions.contains(&p)
    }
}

pub struct Tenants {
    pub(crate) tree: sled::Tree,
}

pub(crate) fn enc<T: Serialize>(v: &T) -> Vec<u8> {
    // Serializing our own plain structs to msgpack cannot fail (no maps with non-string keys,
    // no custom serializers that error); an empty value would surface as a decode error.
    rmp_serde::to_vec_named(v).unwrap_or_default()
}

pub(crate) fn dec<T: for<'de> Deserialize<'de>>(bytes: &[u8], what: &str) -> Result<T> {
    rmp_serde::from_slice(bytes).map_err(|e| corrupt(TREE, format!("{what}: {e}")))
}

impl Tenants {
    pub fn open(db: &sled::Db) -> Result<Self> {
        Ok(Self {
            tree: db.open_tree(TREE)?,
        })
    }

    pub fn tenant(&self, id: &Uuid) -> Result<Option<Tenant>> {
        self.tree
            .get(prefixed(b't', &[id.as_bytes()]))?
            .map(|v| dec(&v, "tenant"))
            .transpose()
    }

    /// Every tenant, oldest first (ids are uuid v7, so key order is creation order).
    pub fn tenants(&self) -> Result<Vec<Tenant>> {
        self.tree
            .scan_prefix([b't'])
            .map(|kv| {
                let (_, v) = kv?;
                dec(&v, "tenant")
            })
            .collect()
    }

    pub fn key_by_hash(&self, hash: &[u8; 32]) -> Result<Option<ApiKey>> {
        self.tree
            .get(prefixed(b'k', &[hash]))?
            .map(|v| dec(&v, "key"))
            .transpose()
    }

    pub fn key_by_id(&self, id: &Uuid) -> Result<Option<ApiKey>> {
        match self.tree.get(prefixed(b'i', &[id.as_bytes()]))? {
            None => Ok(None),
            Some(hash) => self
                .tree
                .get(prefixed(b'k', &[&hash]))?
                .map(|v| dec(&v, "key"))
                .transpose(),
        }
    }

    fn fold(ov: &mut Overlay<'_>, applied: &Applied<'_>) -> Result<()> {
        match applied.event {
            Event::TenantCreated(e) => {
                let t = Tenant {
                    id: e.tenant_id,
                    name: e.name.clone(),
                    plan: e.plan,
                    subscription_active: e.subscription_active,
                    credits: e.credits,
                    created_at: e.created_at,
                    updated_at: e.created_at,
                };
                ov.insert(prefixed(b't', &[e.tenant_id.as_bytes()]), enc(&t));
            }
            Event::TenantUpdated(e) => {
                let key = prefixed(b't', &[e.tenant_id.as_bytes()]);
                if let Some(bytes) = ov.get(&key)? {
                    let mut t: Tenant = dec(&bytes, "tenant")?;
                    if let Some(n) = &e.name {
                        t.name = n.clone();
                    }
                    if let Some(p) = e.plan {
                        t.plan = p;
                    }
                    if let Some(s) = e.subscription_active {
                        t.subscription_active = s;
                    }
                    if let Some(c) = e.credits {
                        t.credits = c;
                    }
                    t.updated_at = e.updated_at;
                    ov.insert(key, enc(&t));
                }
            }
            Event::KeyIssued(e) => {
                let k = ApiKey {
                    key_id: e.key_id,
                    tenant_id: e.tenant_id,
                    permissions: e.permissions.clone(),
                    name: e.name.clone(),
                    created_at: e.created_at,
                    revoked_at: None,
                    scope: e.scope.clone(),
                };
                ov.insert(prefixed(b'k', &[&e.key_hash]), enc(&k));
                ov.insert(prefixed(b'i', &[e.key_id.as_bytes()]), e.key_hash.to_vec());
            }
            Event::KeyRevoked(e) => {
                if let Some(hash) = ov.get(&prefixed(b'i', &[e.key_id.as_bytes()]))? {
                    let key = prefixed(b'k', &[&hash]);
                    if let Some(bytes) = ov.get(&key)? {
                        let mut k: ApiKey = dec(&bytes, "key")?;
                        k.revoked_at.get_or_insert(e.revoked_at);
                        ov.insert(key, enc(&k));
                    }
                }
            }
            Event::CreditsConsumed(e) => {
                let key = prefixed(b't', &[e.tenant_id.as_bytes()]);
                if let Some(bytes) = ov.get(&key)? {
                    let mut t: Tenant = dec(&bytes, "tenant")?;
                    t.credits = (t.credits - e.credits).max(0.0);
                    ov.insert(key, enc(&t));
                }
            }
            _ => crate::webhooks::fold(ov, applied)?,
        }
        Ok(())
    }
}

impl Projection for Tenants {
    fn name(&self) -> &'static str {
        TREE
    }

    fn tree(&self) -> &sled::Tree {
        &self.tree
    }

    fn apply(&self, events: &[Applied<'_>]) -> Result<()> {
        if let Some((ov, last)) = fold_new(&self.tree, TREE, events, Self::fold)? {
            ov.commit(last)?;
        }
        Ok(())
    }

    fn reset(&self) -> Result<()> {
        self.tree.clear()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{KeyIssued, KeyRevoked, TenantCreated, TenantUpdated};

    fn db() -> (tempfile::TempDir, sled::Db) {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = sled::open(dir.path()).expect("open");
        (dir, db)
    }

    #[test]
    fn events_that_change_nothing_leave_the_checkpoint_behind_until_settled_or_far() {
        let (_d, db) = db();
        let p = Tenants::open(&db).expect("open");
        let tid = Uuid::now_v7();
        let created = Event::TenantCreated(TenantCreated {
            tenant_id: tid,
            name: "acme".into(),
            plan: Plan::Free,
            subscription_active: true,
            credits: 0.0,
            created_at: 1,
        });
        p.apply(&[Applied::at(1, &created)]).expect("apply");
        assert_eq!(p.checkpoint().expect("cp"), 1);
        // A key revocation of an unknown key changes nothing here: no write, not even the
        // checkpoint.
        let noop = Event::KeyRevoked(KeyRevoked {
            key_id: Uuid::now_v7(),
            tenant_id: tid,
            revoked_at: 2,
        });
        p.apply(&[Applied::at(2, &noop)]).expect("apply");
        assert_eq!(p.checkpoint().expect("cp"), 1);
        p.settle(2).expect("settle");
        assert_eq!(p.checkpoint().expect("cp"), 2);
        // Settling never moves a checkpoint back.
        p.settle(1).expect("settle");
        assert_eq!(p.checkpoint().expect("cp"), 2);
        // Far enough behind, an empty batch writes the checkpoint anyway.
        let far = 2 + crate::overlay::CHECKPOINT_LAG;
        p.apply(&[Applied::at(far - 1, &noop)]).expect("apply");
        assert_eq!(p.checkpoint().expect("cp"), 2);
        p.apply(&[Applied::at(far, &noop)]).expect("apply");
        assert_eq!(p.checkpoint().expect("cp"), far);
    }

    #[test]
    fn given_tenant_and_key_events_then_lookups_answer() {
        let (_d, db) = db();
        let p = Tenants::open(&db).expect("open");
        let tid = Uuid::now_v7();
        let kid = Uuid::now_v7();
        let events = [
            Event::TenantCreated(TenantCreated {
                tenant_id: tid,
                name: "acme".into(),
                plan: Plan::Free,
                subscription_active: true,
                credits: 10.0,
                created_at: 1,
            }),
            Event::TenantUpdated(TenantUpdated {
                tenant_id: tid,
                name: None,
                plan: Some(Plan::Business),
                subscription_active: None,
                credits: Some(3.0),
                updated_at: 2,
            }),
            Event::KeyIssued(KeyIssued {
                key_id: kid,
                tenant_id: tid,
                key_hash: [7; 32],
                permissions: vec![Permission::AuditRead],
                name: Some("ci".into()),
                created_at: 3,
                scope: None,
            }),
        ];
        let applied = Applied::in_order(&events);
        p.apply(&applied).expect("apply");
        // Applying the same events again changes nothing.
        p.apply(&applied).expect("apply again");

        let t = p.tenant(&tid).expect("read").expect("tenant");
        assert_eq!((t.plan, t.credits, t.updated_at), (Plan::Business, 3.0, 2));
        let k = p.key_by_hash(&[7; 32]).expect("read").expect("key");
        assert_eq!(k.tenant_id, tid);
        assert!(k.has(Permission::AuditRead) && !k.has(Permission::MemoryWrite));
        assert_eq!(p.checkpoint().expect("cp"), 3);

        let revoke = Event::KeyRevoked(KeyRevoked {
            key_id: kid,
            tenant_id: tid,
            revoked_at: 9,
        });
        p.apply(&[Applied::at(4, &revoke)]).expect("apply");
        assert_eq!(
            p.key_by_id(&kid).expect("read").expect("key").revoked_at,
            Some(9)
        );
        p.reset().expect("reset");
        assert_eq!(p.checkpoint().expect("cp"), 0);
        assert!(p.tenant(&tid).expect("read").is_none());
    }
}
