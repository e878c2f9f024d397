//! The command layer: every decision the service takes on a request, as a plain function.
//!
//! A command takes checked wire types (`crate::wire`) and a read-only [`Context`] (the
//! projections as they stand, the time and the ids it decides with) and gives a [`Decision`]:
//! the events to append, the precondition the appender checks right before sealing them, the
//! answer, and what the request's audit entry records beside it ([`Audit`]). Or a
//! [`Refusal`], a row of the error registry with its message.
//!
//! A command does no I/O: it reads no clock and makes no id it was not given (both come in the
//! context), calls no provider (the handler embeds, extracts and asks the resolver first, and
//! passes what it got) and appends nothing (the handler records). So the same function serves
//! the HTTP handlers, the expiry sweeper and the fuzz targets, and is tested on real
//! projections with the events of its case applied ([`given`]).
//!
//! ```text
//! handler ─▶ extract ─▶ embed, extract, resolve ─▶ decide ─────────▶ record
//!            (wire type,  (providers, when the     (command::*:       (the gate, or the
//!             checked)     command needs them)      events, check,     appender: one
//!                                                   answer, audit)     atomic append)
//! ```
//!
//! The commands, by module:
//! - [`memory::create`]: a memory created, alone ([`memory::create::create`]) or in a batch
//!   ([`memory::create::create_batch`]); the one place a `MemoryCreated` is built, which
//!   extraction uses too.
//! - [`memory::resolve`]: what a new memory does to the stored ones (`resolve: true`): the
//!   memories it is compared with, and the duplicate or supersede decision.
//! - [`memory::update`]: one update or a batch: found and checked first, embedded, decided.
//! - [`memory::delete`]: one memory, every memory of a type, or those a filter matches.
//! - [`memory::extract`]: an extraction's price, its duplicates, its memories and its charge,
//!   with the credits precondition.
//! - [`memory::search`]: a search's results and what its audit entry records of them.
//! - [`memory::expiry`]: the expiry sweep, appended only while its memories are still live and
//!   still expired.
//! - [`export`]: an export's plan gate (2202), retention (2201), and the one-export rule (2203)
//!   and quotas (2204) as its precondition.
//! - [`erase`]: an erasure's keys to destroy and memories erased, for a scope, some memories
//!   or a tenant.
//! - [`admin`]: tenants created and changed, keys issued and revoked, gateway entries ingested.

pub mod admin;
pub mod erase;
pub mod export;
#[doc(hidden)]
pub mod given;
pub mod memory;
pub mod webhook;

use auditmem_projections::{AuditDetail, Event, Projections};
use uuid::Uuid;

use crate::log::appender::Precondition;
use crate::registry::ErrorCode;
use crate::wire::Invalid;

/// What a command reads: the projections as they stand, the time it decides at, and the ids it
/// gives to what it creates.
pub struct Context<'a> {
    pub projections: &'a Projections,
    /// The time the command decides at, microseconds since the Unix epoch.
    pub now: i64,
    /// The clock a precondition reads when the appender checks it, right before sealing (a
    /// quota counts what is live then, not when the request was decided).
    pub clock: Clock,
    ids: Ids<'a>,
}

impl<'a> Context<'a> {
    pub fn new(projections: &'a Projections, now: i64, clock: Clock, ids: Ids<'a>) -> Self {
        Context {
            projections,
            now,
            clock,
            ids,
        }
    }

    /// The service's context: its clock, now, and time-ordered (v7) ids.
    pub fn service(projections: &'a Projections) -> Self {
        Context::new(
            projections,
            crate::wire::time::now(),
            Clock::System,
            Ids::V7,
        )
    }

    /// A new id.
    pub fn id(&self) -> Uuid {
        match self.ids {
            Ids::V7 => Uuid::now_v7(),
            Ids::Nil => Uuid::nil(),
            Ids::Counted(c) => c.next(),
        }
    }

    /// [`Context::now`] in whole milliseconds, as times are stored and shown.
    pub fn now_stored(&self) -> i64 {
        auditmem_projections::audit_view::millis_floor(self.now)
    }
}

/// Where the ids of what a command creates come from.
#[derive(Clone, Copy, Debug)]
pub enum Ids<'a> {
    /// Time-ordered (v7) ids: the service's.
    V7,
    /// The nil id every time (fuzzing: a crash reproduces).
    Nil,
    /// 1, 2, 3, ... in the order asked (tests).
    Counted(&'a given::Counter),
}

/// The time a precondition reads when it is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    /// The service's clock.
    System,
    /// Always this time, microseconds since the Unix epoch (tests, fuzzing).
    Fixed(i64),
}

impl Clock {
    pub fn now(self) -> i64 {
        match self {
            Clock::System => crate::wire::time::now(),
            Clock::Fixed(t) => t,
        }
    }
}

/// What the request's audit entry records besides the request and the response: the
/// command's detail fields and its charges.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Audit {
    pub detail: AuditDetail,
    pub credits: f64,
    pub usd: f64,
    /// The subjects whose data the entry shows besides the request's own scope (every memory
    /// it wrote, changed or answered with, by that memory's subjects): the entry's personal
    /// fields are sealed under all of them, so erasing any one erases the entry's copy.
    pub subjects: Vec<auditmem_projections::seal::Subject>,
}

/// A command's outcome: the answer, the events that make it so, the rule the appender checks
/// right before sealing them, and what the audit entry records.
pub struct Decision<A> {
    pub answer: A,
    pub events: Vec<Event>,
    pub check: Option<Precondition>,
    pub audit: Audit,
}

impl<A> Decision<A> {
    /// An answer with its events, no precondition and nothing recorded beyond the request.
    pub fn new(answer: A, events: Vec<Event>) -> Self {
        Decision {
            answer,
            events,
            check: None,
            audit: Audit::default(),
        }
    }

    /// The same decision with its audit detail.
    pub fn recording(mut self, detail: AuditDetail) -> Self {
        self.audit.detail = detail;
        self
    }
}

/// Why a command refused.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Refusal {
    /// A rule refused: the registry's row and the caller's message.
    #[error("{message}")]
    Rule { code: ErrorCode, message: String },
    /// The read models could not be read: the detail is for the server log, not the caller.
    #[error("{0}")]
    Internal(String),
}

impl Refusal {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Refusal::Rule {
            code,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::BadRequest, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }

    pub fn internal(detail: impl std::fmt::Display) -> Self {
        Refusal::Internal(detail.to_string())
    }

    /// The registry row the refusal answers as.
    pub fn code(&self) -> ErrorCode {
        match self {
            Refusal::Rule { code, .. } => *code,
            Refusal::Internal(_) => ErrorCode::Internal,
        }
    }
}

impl From<auditmem_projections::seal::KeyError> for Refusal {
    /// A key store out of reach is the log's 503 (retry); any other key failure is internal.
    fn from(e: auditmem_projections::seal::KeyError) -> Self {
        match e {
            // The store's own names (subject digests) go to the server log, not to callers.
            auditmem_projections::seal::KeyError::Unavailable(why) => {
                tracing::warn!(error = %why, "the key store cannot be reached");
                Refusal::new(
                    crate::registry::ErrorCode::Unavailable,
                    "the key store cannot be reached (a cluster without a quorum): retry",
                )
            }
            e => Refusal::internal(e),
        }
    }
}

impl From<Invalid> for Refusal {
    fn from(e: Invalid) -> Self {
        Refusal::bad_request(e.0)
    }
}

impl From<auditmem_projections::ProjectionError> for Refusal {
    fn from(e: auditmem_projections::ProjectionError) -> Self {
        Refusal::internal(e)
    }
}

impl From<std::io::Error> for Refusal {
    fn from(e: std::io::Error) -> Self {
        Refusal::internal(e)
    }
}
