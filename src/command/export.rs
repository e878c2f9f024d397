//! `POST /v1/audit/logs/export`: an export task started.
//!
//! Decided here: the plan (below Pro: 2202, before the body is looked at), the times against
//! the plan's retention window (2201) and each other (4000), and the records it will hold.
//! Decided by the appender right before sealing, against everything committed before it
//! (so two racing requests cannot both pass): no other export of the tenant in progress
//! (2203), then the tenant's quotas (2204, `crate::export::quota`).

use std::time::Duration;

use auditmem_projections::audit_index::Filter;
use auditmem_projections::tenants::Tenant;
use auditmem_projections::{Event, ExportRequested, Projections};

use super::{Context, Decision, Refusal};
use crate::export::quota::Quota;
use crate::log::appender::{Precondition, Rejection};
use crate::registry::ErrorCode;
use crate::wire::export::{ExportAsked, ExportCreated, PROCESSING};
use crate::wire::time::CLOCK_SKEW_MICROS;

const DAY_MICROS: i64 = 86_400 * 1_000_000;

/// The rules an export is held to: the tenant's plan's retention, the quotas, and how long a
/// completed file lives.
#[derive(Clone, Copy, Debug)]
pub struct ExportRules {
    pub retention_days: i64,
    pub quota: Quota,
    pub ttl: Duration,
}

/// The export `asked` for `tenant`: `asked` reads the body (the request as checked, or why it
/// was refused), and is called only once the plan allows exports.
pub fn create(
    ctx: &Context<'_>,
    tenant: &Tenant,
    asked: impl FnOnce() -> Result<ExportAsked, Refusal>,
    rules: &ExportRules,
) -> Result<Decision<ExportCreated>, Refusal> {
    // The plan decides before the body is looked at.
    if !tenant.plan.can_export() {
        return Err(Refusal::new(
            ErrorCode::ExportNeedsPro,
            ErrorCode::ExportNeedsPro.label(),
        ));
    }
    let ExportAsked { format, start, end } = asked()?;
    let now = ctx.now;
    let window = now - rules.retention_days * DAY_MICROS;
    let beyond = |field: &str| {
        Refusal::new(
            ErrorCode::ExportRangeExceedsRetention,
            format!(
                "export time range exceeds the plan retention days: {field} is more than {} days ago",
                rules.retention_days
            ),
        )
    };
    // A start at most a clock's skew before the window is the window: a client asking for
    // exactly "the last 90 days" by its own clock is not refused for the milliseconds its
    // request took to arrive.
    let earliest = window - CLOCK_SKEW_MICROS;
    if start.is_some_and(|s| s < earliest) {
        return Err(beyond("start_time"));
    }
    if end.is_some_and(|e| e < earliest) {
        return Err(beyond("end_time"));
    }
    let (start, end) = (start.unwrap_or(window).max(window), end.unwrap_or(now));
    if end < start {
        return Err(Refusal::bad_request("end_time is before start_time"));
    }
    let estimated = ctx.projections.audit.count(&Filter {
        tenant_id: tenant.id,
        action: None,
        from: start,
        to: end,
    })? as u64;
    let export_id = ctx.id();
    let event = Event::ExportRequested(ExportRequested {
        export_id,
        tenant_id: tenant.id,
        format,
        start_time: start,
        end_time: end,
        estimated_records: estimated,
        with_chain: tenant.plan.shows_hash(),
        requested_at: now,
    });
    let mut d = Decision::new(
        ExportCreated {
            export_id,
            status: PROCESSING,
            estimated_records: estimated,
            download_url: None,
        },
        vec![event],
    );
    d.check = Some(may_start(ctx, tenant.id, rules));
    Ok(d)
}

/// The precondition: no export of the tenant in progress, then the quotas, at the time the
/// context's clock reads when it is checked.
pub(crate) fn may_start(
    ctx: &Context<'_>,
    tenant_id: uuid::Uuid,
    rules: &ExportRules,
) -> Precondition {
    let (quota, ttl, clock) = (rules.quota, rules.ttl, ctx.clock);
    Box::new(move |p: &Projections| {
        match p.exports.processing_of(&tenant_id) {
            Ok(None) => {}
            Ok(Some(_)) => {
                return Err(Rejection {
                    code: ErrorCode::ExportInProgress,
                    message: ErrorCode::ExportInProgress.label().into(),
                    retry_after: None,
                })
            }
            Err(e) => {
                return Err(Rejection {
                    code: ErrorCode::Internal,
                    message: format!("reading exports: {e}"),
                    retry_after: None,
                })
            }
        }
        let at = clock.now();
        quota
            .check(&p.exports.usage_of(&tenant_id, at), at, ttl)
            .map_err(|e| Rejection {
                code: ErrorCode::ExportQuotaExceeded,
                message: e.message,
                retry_after: Some(e.retry_after.as_secs()),
            })
    })
}

#[cfg(test)]
mod tests {
    use auditmem_projections::{
        AuditDetail, AuditEntry, AuditRecorded, ExportCompleted, ExportFormat, Plan,
    };
    use uuid::Uuid;

    use super::*;
    use crate::command::given::{Counter, Given, NOON};
    use crate::command::memory::cases::{tenant, TENANT};

    const RULES: ExportRules = ExportRules {
        retention_days: 90,
        quota: Quota {
            max_files: 2,
            max_bytes: 0,
            max_per_hour: 0,
        },
        ttl: Duration::from_secs(3600),
    };

    fn asked(
        start: Option<i64>,
        end: Option<i64>,
    ) -> impl FnOnce() -> Result<ExportAsked, Refusal> {
        move || {
            Ok(ExportAsked {
                format: ExportFormat::Json,
                start,
                end,
            })
        }
    }

    fn unreadable() -> Result<ExportAsked, Refusal> {
        Err(Refusal::new(
            ErrorCode::UnsupportedMediaType,
            "the body must be JSON sent with Content-Type: application/json",
        ))
    }

    fn entry(at: i64, n: u128) -> Event {
        Event::AuditRecorded(Box::new(AuditRecorded {
            tenant_id: TENANT,
            entry: AuditEntry {
                id: Uuid::from_u128(0x100 + n),
                action: "memory.read".into(),
                model_id: None,
                project_id: None,
                gateway_id: None,
                ip_address: None,
                user_agent: None,
                http_status: 200,
                is_success: true,
                is_cache_hit: false,
                error_code: None,
                error_msg: None,
                duration: None,
                credits_consumed: 0.0,
                balance_consumed_usd: 0.0,
                tokens: None,
                metadata: None,
                created_at: at,
                detail_hash: None,
            },
            detail: AuditDetail::default(),
            sealed: None,
            sealed_detail: None,
        }))
    }

    fn tenant_on(plan: Plan) -> Tenant {
        Tenant {
            id: TENANT,
            name: "t".into(),
            plan,
            subscription_active: true,
            credits: 0.0,
            created_at: 0,
            updated_at: 0,
        }
    }

    #[test]
    fn given_a_free_or_basic_plan_when_exporting_then_2202_even_before_the_body() {
        let given = Given::with(&[tenant(TENANT, Plan::Free, 0.0)]).expect("given");
        let ids = Counter::new();
        let ctx = given.at(NOON, &ids);
        let need_pro = Some(Refusal::new(
            ErrorCode::ExportNeedsPro,
            "export needs Pro or above",
        ));
        for plan in [Plan::Free, Plan::Basic] {
            let t = tenant_on(plan);
            assert_eq!(create(&ctx, &t, asked(None, None), &RULES).err(), need_pro);
            let read = std::cell::Cell::new(false);
            let body = || {
                read.set(true);
                unreadable()
            };
            assert_eq!(create(&ctx, &t, body, &RULES).err(), need_pro);
            assert!(!read.get(), "the body was read on {plan:?}");
        }
        // On Pro the body's refusal is the answer.
        let refused = create(&ctx, &tenant_on(Plan::Pro), unreadable, &RULES).err();
        assert_eq!(
            refused.map(|r| r.code()),
            Some(ErrorCode::UnsupportedMediaType)
        );
    }

    #[test]
    fn given_entries_when_exporting_then_the_window_is_bounded_by_retention_and_counted() {
        let day = DAY_MICROS;
        let given = Given::with(&[
            tenant(TENANT, Plan::Pro, 0.0),
            entry(NOON - 100 * day, 1),
            entry(NOON - 89 * day, 2),
            entry(NOON - day, 3),
            entry(NOON, 4),
        ])
        .expect("given");
        let ids = Counter::new();
        let ctx = given.at(NOON, &ids);
        let pro = tenant_on(Plan::Pro);
        // Default window: the plan's 90 days up to now.
        let d = create(&ctx, &pro, asked(None, None), &RULES).expect("decided");
        assert_eq!(
            d.events,
            vec![Event::ExportRequested(ExportRequested {
                export_id: Uuid::from_u128(1),
                tenant_id: TENANT,
                format: ExportFormat::Json,
                start_time: NOON - 90 * day,
                end_time: NOON,
                estimated_records: 3,
                with_chain: false,
                requested_at: NOON,
            })]
        );
        assert_eq!(d.answer.estimated_records, 3);
        // A start a clock's skew before the window is the window; one more microsecond is not.
        let edge = NOON - 90 * day - CLOCK_SKEW_MICROS;
        let d = create(&ctx, &pro, asked(Some(edge), None), &RULES).expect("decided");
        assert!(
            matches!(&d.events[0], Event::ExportRequested(e) if e.start_time == NOON - 90 * day)
        );
        assert_eq!(
            create(&ctx, &pro, asked(Some(edge - 1), None), &RULES).err(),
            Some(Refusal::new(
                ErrorCode::ExportRangeExceedsRetention,
                "export time range exceeds the plan retention days: start_time is more than 90 days ago"
            ))
        );
        assert_eq!(
            create(&ctx, &pro, asked(None, Some(edge - 1)), &RULES)
                .err()
                .map(|r| r.code()),
            Some(ErrorCode::ExportRangeExceedsRetention)
        );
        assert_eq!(
            create(
                &ctx,
                &pro,
                asked(Some(NOON - day), Some(NOON - 2 * day)),
                &RULES
            )
            .err(),
            Some(Refusal::bad_request("end_time is before start_time"))
        );
        // Business sees the chain.
        let d =
            create(&ctx, &tenant_on(Plan::Business), asked(None, None), &RULES).expect("decided");
        assert!(matches!(&d.events[0], Event::ExportRequested(e) if e.with_chain));
    }

    #[test]
    fn given_an_export_processing_when_another_is_asked_then_the_precondition_refuses_2203() {
        let mut given = Given::with(&[tenant(TENANT, Plan::Pro, 0.0)]).expect("given");
        let ids = Counter::new();
        let pro = tenant_on(Plan::Pro);
        let (first, second) = {
            let ctx = given.at(NOON, &ids);
            (
                create(&ctx, &pro, asked(None, None), &RULES).expect("decided"),
                create(&ctx, &pro, asked(None, None), &RULES).expect("decided"),
            )
        };
        let check = first.check.expect("a precondition");
        assert_eq!(check(&given.projections), Ok(()));
        given.apply(&first.events).expect("apply");
        let check = second.check.expect("a precondition");
        assert_eq!(
            check(&given.projections),
            Err(Rejection {
                code: ErrorCode::ExportInProgress,
                message: "an export task is in progress".into(),
                retry_after: None,
            })
        );
        // Completed, it no longer blocks; two live files reach the quota of two (2204).
        given
            .apply(&[Event::ExportCompleted(ExportCompleted {
                export_id: Uuid::from_u128(1),
                tenant_id: TENANT,
                records: 0,
                bytes: 10,
                blake3: [0; 32],
                completed_at: NOON,
                expires_at: NOON + 3_600_000_000,
                first: None,
                last: None,
                formula_guard: false,
            })])
            .expect("apply");
        assert_eq!(check(&given.projections), Ok(()));
        given.apply(&second.events).expect("apply");
        let third = {
            let ctx = given.at(NOON, &ids);
            create(&ctx, &pro, asked(None, None), &RULES).expect("decided")
        };
        given
            .apply(&[Event::ExportCompleted(ExportCompleted {
                export_id: Uuid::from_u128(2),
                tenant_id: TENANT,
                records: 0,
                bytes: 10,
                blake3: [0; 32],
                completed_at: NOON,
                expires_at: NOON + 1_800_000_000,
                first: None,
                last: None,
                formula_guard: false,
            })])
            .expect("apply");
        let refused =
            (third.check.expect("a precondition"))(&given.projections).expect_err("over the quota");
        assert_eq!(refused.code, ErrorCode::ExportQuotaExceeded);
        // The first file to expire frees the place: in 30 minutes.
        assert_eq!(refused.retry_after, Some(1800));
    }
}
