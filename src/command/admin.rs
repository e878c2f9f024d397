//! The admin API's commands: tenants created and changed, keys issued and revoked, and the
//! gateway's audit entries ingested. Operator actions, not tenant operations: their events are
//! appended as they are, with no tenant audit entry and no precondition.

use std::collections::HashMap;

use auditmem_projections::seal::Subject;
use auditmem_projections::tenants::Tenant as TenantState;
use auditmem_projections::{
    AuditRecorded, Event, KeyIssued, KeyRevoked, TenantCreated, TenantUpdated,
};
use uuid::Uuid;

use super::{Context, Decision, Refusal};
use crate::wire::admin::{
    CreateKeyRequest, IssuedKey, NewKey, NewTenant, RevokedKey, Tenant, TenantChanges,
    UpdateTenantRequest,
};
use crate::wire::audit::{IngestEntry, Ingested};
use crate::wire::time::Time;

/// The tenant a path names; an id that is no id is a tenant that does not exist.
pub fn tenant_by_path(ctx: &Context<'_>, id: &str) -> Result<TenantState, Refusal> {
    let not_found = || Refusal::not_found("tenant not found");
    let id = Uuid::parse_str(id).map_err(|_| not_found())?;
    ctx.projections.tenants.tenant(&id)?.ok_or_else(not_found)
}

/// A new tenant, as it is stored.
pub fn create_tenant(ctx: &Context<'_>, new: NewTenant) -> Decision<Tenant> {
    let NewTenant {
        name,
        plan,
        subscription_active,
        credits,
    } = new;
    let at = ctx.now_stored();
    let id = ctx.id();
    let tenant = Tenant {
        id,
        name: name.clone(),
        plan,
        subscription_active,
        credits,
        created_at: Time(at),
        updated_at: Time(at),
    };
    let event = Event::TenantCreated(TenantCreated {
        tenant_id: id,
        name,
        plan,
        subscription_active,
        credits,
        created_at: at,
    });
    Decision::new(tenant, vec![event])
}

/// The tenant `id` changed: looked up first (a missing tenant is 404 whatever the values), then
/// the values checked (400).
pub fn update_tenant(
    ctx: &Context<'_>,
    id: &str,
    update: UpdateTenantRequest,
) -> Result<Decision<Tenant>, Refusal> {
    let mut t = tenant_by_path(ctx, id)?;
    let TenantChanges {
        name,
        plan,
        subscription_active,
        credits,
    } = update.changes()?;
    let at = ctx.now_stored();
    let event = Event::TenantUpdated(TenantUpdated {
        tenant_id: t.id,
        name: name.clone(),
        plan,
        subscription_active,
        credits,
        updated_at: at,
    });
    // The tenant as the event leaves it (the projection applies it the same way).
    t.name = name.unwrap_or(t.name);
    t.plan = plan.unwrap_or(t.plan);
    t.subscription_active = subscription_active.unwrap_or(t.subscription_active);
    t.credits = credits.unwrap_or(t.credits);
    t.updated_at = at;
    Ok(Decision::new(Tenant::from(&t), vec![event]))
}

/// A key the handler made: what the caller is shown once, and the blake3 hash that is stored.
pub struct Secret {
    pub key: String,
    pub hash: [u8; 32],
}

/// A key issued to the tenant `tenant` names: the tenant looked up first (404 whatever the
/// values), then the permissions checked (400).
pub fn issue_key(
    ctx: &Context<'_>,
    tenant: &str,
    request: CreateKeyRequest,
    secret: Secret,
) -> Result<Decision<IssuedKey>, Refusal> {
    let t = tenant_by_path(ctx, tenant)?;
    let NewKey {
        permissions,
        name,
        scope,
    } = request.key()?;
    let key_id = ctx.id();
    let created_at = ctx.now_stored();
    let event = Event::KeyIssued(KeyIssued {
        key_id,
        tenant_id: t.id,
        key_hash: secret.hash,
        permissions: permissions.clone(),
        name: name.clone(),
        created_at,
        scope: scope.clone(),
    });
    let issued = IssuedKey {
        id: key_id,
        tenant_id: t.id,
        name,
        api_key: secret.key,
        permissions,
        created_at: Time(created_at),
        scope: scope.map(Into::into),
    };
    Ok(Decision::new(issued, vec![event]))
}

/// The key `key_id` names revoked; revoking again appends nothing and answers the first
/// revocation.
pub fn revoke_key(ctx: &Context<'_>, key_id: &str) -> Result<Decision<RevokedKey>, Refusal> {
    let not_found = || Refusal::not_found("key not found");
    let id = Uuid::parse_str(key_id).map_err(|_| not_found())?;
    let key = ctx
        .projections
        .tenants
        .key_by_id(&id)?
        .ok_or_else(not_found)?;
    let (revoked_at, events) = match key.revoked_at {
        Some(at) => (at, Vec::new()),
        None => {
            let at = ctx.now_stored();
            let event = Event::KeyRevoked(KeyRevoked {
                key_id: id,
                tenant_id: key.tenant_id,
                revoked_at: at,
            });
            (at, vec![event])
        }
    };
    let revoked = RevokedKey {
        id,
        revoked: true,
        revoked_at: Time(revoked_at),
    };
    Ok(Decision::new(revoked, events))
}

/// The gateway's entries, each checked (its fields, its detail within `body_limit`) and of a
/// known tenant, as one group of `AuditRecorded`s; the first refusal refuses them all.
pub fn ingest(
    ctx: &Context<'_>,
    entries: Vec<IngestEntry>,
    body_limit: usize,
) -> Result<Decision<Ingested>, Refusal> {
    let mut tenants: HashMap<Uuid, bool> = HashMap::new();
    let mut events = Vec::with_capacity(entries.len());
    let mut ids = Vec::with_capacity(entries.len());
    for (i, e) in entries.into_iter().enumerate() {
        let known = match tenants.get(&e.tenant_id) {
            Some(k) => *k,
            None => {
                let k = ctx.projections.tenants.tenant(&e.tenant_id)?.is_some();
                tenants.insert(e.tenant_id, k);
                k
            }
        };
        if !known {
            return Err(Refusal::bad_request(format!(
                "entries[{i}]: unknown tenant_id {}",
                e.tenant_id
            )));
        }
        let id = ctx.id();
        ids.push(id);
        let checked = e.check(i, id, ctx.now, body_limit)?;
        // Sealed under the scope the recorded request names, else the tenant's key.
        let mut subjects = crate::wire::audit::scope_of(
            checked.tenant_id,
            None,
            checked.detail.request_body.as_ref(),
        );
        if subjects.is_empty() {
            subjects.push(Subject::Tenant(checked.tenant_id));
        }
        let recorded = AuditRecorded::sealed_for(
            checked.tenant_id,
            checked.entry,
            checked.detail,
            &*ctx.projections.keys,
            &subjects,
        )
        .map_err(Refusal::from)?;
        events.push(Event::AuditRecorded(Box::new(recorded)));
    }
    Ok(Decision::new(Ingested { ids }, events))
}

#[cfg(test)]
mod tests {
    use auditmem_projections::{Permission, Plan};
    use serde_json::json;

    use super::*;
    use crate::api::extract::read;
    use crate::command::given::{Counter, Given, NOON};
    use crate::command::memory::cases::{tenant, TENANT};
    use crate::wire::admin::CreateTenantRequest;
    use crate::wire::audit::IngestRequest;

    fn body<T: crate::wire::Body>(v: serde_json::Value) -> T::Checked {
        read::<T>(true, v.to_string().as_bytes()).expect("a valid body")
    }

    #[test]
    fn given_no_tenant_when_one_is_created_then_its_event_and_answer_agree_with_the_projection() {
        let mut given = Given::new().expect("given");
        let ids = Counter::new();
        let d = {
            let ctx = given.at(NOON + 999, &ids);
            create_tenant(
                &ctx,
                body::<CreateTenantRequest>(
                    json!({"name": "acme", "plan": "pro", "credits": 12.5}),
                ),
            )
        };
        assert_eq!(
            d.events,
            vec![Event::TenantCreated(TenantCreated {
                tenant_id: Uuid::from_u128(1),
                name: "acme".into(),
                plan: Plan::Pro,
                subscription_active: true,
                credits: 12.5,
                created_at: NOON,
            })]
        );
        assert_applied_as_answered(&mut given, &d.events, &Uuid::from_u128(1), &d.answer);
    }

    #[test]
    fn given_a_tenant_when_updated_then_404_first_then_400_then_the_changes_as_stored() {
        let mut given = Given::with(&[tenant(TENANT, Plan::Free, 5.0)]).expect("given");
        let ids = Counter::new();
        let ctx = given.at(NOON, &ids);
        let bad: UpdateTenantRequest = body::<UpdateTenantRequest>(json!({"credits": -1}));
        assert_eq!(
            update_tenant(&ctx, &Uuid::from_u128(0xEE).to_string(), bad).err(),
            Some(Refusal::not_found("tenant not found"))
        );
        let bad: UpdateTenantRequest = body::<UpdateTenantRequest>(json!({"credits": -1}));
        assert_eq!(
            update_tenant(&ctx, &TENANT.to_string(), bad)
                .err()
                .map(|r| r.code()),
            Some(crate::registry::ErrorCode::BadRequest)
        );
        let d = update_tenant(
            &ctx,
            &TENANT.to_string(),
            body::<UpdateTenantRequest>(json!({"plan": "business", "credits": 0})),
        )
        .expect("decided");
        assert_eq!(
            d.events,
            vec![Event::TenantUpdated(TenantUpdated {
                tenant_id: TENANT,
                name: None,
                plan: Some(Plan::Business),
                subscription_active: None,
                credits: Some(0.0),
                updated_at: NOON,
            })]
        );
        assert_applied_as_answered(&mut given, &d.events, &TENANT, &d.answer);
    }

    /// Applies `events` and checks that the tenant `id` as stored shows as `answer` did.
    fn assert_applied_as_answered(given: &mut Given, events: &[Event], id: &Uuid, answer: &Tenant) {
        given.apply(events).expect("apply");
        let stored = given
            .projections
            .tenants
            .tenant(id)
            .expect("read")
            .expect("stored");
        assert_eq!(
            serde_json::to_value(Tenant::from(&stored)).expect("json"),
            serde_json::to_value(answer).expect("json")
        );
    }

    #[test]
    fn given_a_key_when_revoked_twice_then_one_event_and_the_first_time_answers_both() {
        let mut given = Given::with(&[tenant(TENANT, Plan::Pro, 0.0)]).expect("given");
        let ids = Counter::new();
        let issued = {
            let ctx = given.at(NOON, &ids);
            issue_key(
                &ctx,
                &TENANT.to_string(),
                body::<CreateKeyRequest>(
                    json!({"permissions": ["memory.write", "audit.read", "memory.write"]}),
                ),
                Secret {
                    key: "amk_test".into(),
                    hash: [7; 32],
                },
            )
            .expect("decided")
        };
        assert_eq!(
            issued.events,
            vec![Event::KeyIssued(KeyIssued {
                key_id: Uuid::from_u128(1),
                tenant_id: TENANT,
                key_hash: [7; 32],
                permissions: vec![Permission::AuditRead, Permission::MemoryWrite],
                name: None,
                created_at: NOON,
                scope: None,
            })]
        );
        assert_eq!(issued.answer.api_key, "amk_test");
        given.apply(&issued.events).expect("apply");
        let key = Uuid::from_u128(1).to_string();
        let first = {
            let ctx = given.at(NOON, &ids);
            revoke_key(&ctx, &key).expect("decided")
        };
        assert_eq!(
            first.events,
            vec![Event::KeyRevoked(KeyRevoked {
                key_id: Uuid::from_u128(1),
                tenant_id: TENANT,
                revoked_at: NOON,
            })]
        );
        given.apply(&first.events).expect("apply");
        let ctx = given.at(NOON + 5_000_000, &ids);
        let again = revoke_key(&ctx, &key).expect("decided");
        assert!(again.events.is_empty());
        assert_eq!(again.answer.revoked_at, Time(NOON));
        assert_eq!(
            revoke_key(&ctx, "nope").err(),
            Some(Refusal::not_found("key not found"))
        );
    }

    #[test]
    fn given_one_tenant_when_entries_name_another_then_the_whole_ingestion_is_refused() {
        let given = Given::with(&[tenant(TENANT, Plan::Pro, 0.0)]).expect("given");
        let ids = Counter::new();
        let ctx = given.at(NOON, &ids);
        let entry = |t: Uuid| json!({"tenant_id": t, "action": "gateway.chat", "http_status": 200});
        let entries = body::<IngestRequest>(json!({"entries": [entry(TENANT), entry(TENANT)]}));
        let d = ingest(&ctx, entries, 64 * 1024).expect("decided");
        assert_eq!(d.answer.ids, vec![Uuid::from_u128(1), Uuid::from_u128(2)]);
        let recorded: Vec<(Uuid, Uuid, i64)> = d
            .events
            .iter()
            .map(|e| match e {
                Event::AuditRecorded(r) => (r.tenant_id, r.entry.id, r.entry.created_at),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            recorded,
            vec![
                (TENANT, Uuid::from_u128(1), NOON),
                (TENANT, Uuid::from_u128(2), NOON)
            ]
        );
        let other = Uuid::from_u128(0xBAD);
        let entries = body::<IngestRequest>(json!({"entries": [entry(TENANT), entry(other)]}));
        assert_eq!(
            ingest(&ctx, entries, 64 * 1024).err(),
            Some(Refusal::bad_request(format!(
                "entries[1]: unknown tenant_id {other}"
            )))
        );
    }
}
