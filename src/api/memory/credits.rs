//! Credits held by the extractions in flight, so that concurrent calls of one tenant see each
//! other before any of them does model work.
//!
//! An extraction reserves what it costs before it extracts or embeds anything: the reservation
//! is granted when the tenant's credits, less everything its other extractions hold, cover it;
//! otherwise the call is refused at once (402). So the sum of what is held and what was charged
//! never exceeds the credits, however many calls run at once.
//!
//! The reservation ([`Hold`]) is released when dropped: when the call fails, is refused, or is
//! abandoned (its future dropped: a request timeout, a client gone), and after its charge is
//! committed. For the last, the hold rides in the response's extensions ([`Held`]): the gate
//! keeps the handler's response until the submission carrying the `CreditsConsumed` is
//! committed and applied to the tenants projection, and the server drops a response's
//! extensions as it writes the head, so the committed charge replaces the hold before the
//! caller reads its answer. Between the two, the charge is counted twice, which can only refuse
//! a concurrent call, never overspend. The credits are read under the ledger's lock, so a
//! reservation never pairs a hold's release with credits read before its charge was applied.
//!
//! The appender still checks the charge at commit (`credits_cover`): an admin may lower a
//! tenant's credits while its extraction runs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::response::{IntoResponse, Response};
use uuid::Uuid;

use crate::api::error::ApiError;

/// The reservations of every tenant; clones share them.
#[derive(Clone, Debug, Default)]
pub struct Reservations(Arc<Mutex<Ledger>>);

#[derive(Debug, Default)]
struct Ledger {
    next_id: u64,
    /// Each tenant's holds (id, credits); a tenant without one has no entry. Summed when asked,
    /// so that releases never leave floating-point residue behind.
    held: HashMap<Uuid, Vec<(u64, f64)>>,
}

impl Ledger {
    fn held(&self, tenant: &Uuid) -> f64 {
        self.held
            .get(tenant)
            .map_or(0.0, |h| h.iter().map(|(_, c)| c).sum())
    }
}

/// Why a reservation was not granted.
#[derive(Debug, PartialEq)]
pub enum Refused {
    /// The credits, less what the tenant's other calls hold, do not cover it.
    Short {
        needed: f64,
        credits: f64,
        held: f64,
    },
    /// The tenant's credits could not be read.
    Unreadable(ApiError),
}

impl Reservations {
    /// Holds `amount` credits of `tenant`, whose credits `credits()` reads (under the ledger's
    /// lock: module doc).
    pub fn reserve(
        &self,
        tenant: Uuid,
        amount: f64,
        credits: impl FnOnce() -> Result<f64, ApiError>,
    ) -> Result<Hold, Refused> {
        let mut ledger = self.lock();
        let credits = credits().map_err(Refused::Unreadable)?;
        let held = ledger.held(&tenant);
        if credits - held < amount {
            return Err(Refused::Short {
                needed: amount,
                credits,
                held,
            });
        }
        let id = ledger.next_id;
        ledger.next_id += 1;
        ledger.held.entry(tenant).or_default().push((id, amount));
        Ok(Hold {
            ledger: self.clone(),
            tenant,
            id,
        })
    }

    /// What `tenant`'s calls in flight hold.
    pub fn held(&self, tenant: &Uuid) -> f64 {
        self.lock().held(tenant)
    }

    /// Every change is one push or one removal, so a poisoned lock still holds a consistent
    /// ledger.
    fn lock(&self) -> MutexGuard<'_, Ledger> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A reservation; dropping it releases the credits.
#[derive(Debug)]
pub struct Hold {
    ledger: Reservations,
    tenant: Uuid,
    id: u64,
}

impl Drop for Hold {
    fn drop(&mut self) {
        let mut ledger = self.ledger.lock();
        if let Some(holds) = ledger.held.get_mut(&self.tenant) {
            holds.retain(|(id, _)| *id != self.id);
            if holds.is_empty() {
                ledger.held.remove(&self.tenant);
            }
        }
    }
}

/// A response whose hold lasts as long as it does (module doc).
pub struct Held<R> {
    pub response: R,
    pub hold: Hold,
}

/// The hold as a response extension, which must be `Clone`.
#[derive(Clone)]
struct HeldExtension(#[allow(dead_code)] Arc<Hold>);

impl<R: IntoResponse> IntoResponse for Held<R> {
    fn into_response(self) -> Response {
        let mut resp = self.response.into_response();
        resp.extensions_mut()
            .insert(HeldExtension(Arc::new(self.hold)));
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reserve(r: &Reservations, tenant: Uuid, amount: f64, credits: f64) -> Result<Hold, Refused> {
        r.reserve(tenant, amount, || Ok(credits))
    }

    #[test]
    fn holds_of_one_tenant_add_up_and_release_when_dropped() {
        let r = Reservations::default();
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let first = reserve(&r, a, 21.0, 30.0).unwrap();
        assert_eq!(
            reserve(&r, a, 21.0, 30.0).unwrap_err(),
            Refused::Short {
                needed: 21.0,
                credits: 30.0,
                held: 21.0
            }
        );
        // Another tenant's credits are its own.
        let other = reserve(&r, b, 21.0, 30.0).unwrap();
        let second = reserve(&r, a, 9.0, 30.0).unwrap();
        assert_eq!(r.held(&a), 30.0);
        drop(first);
        assert_eq!(r.held(&a), 9.0);
        let third = reserve(&r, a, 21.0, 30.0).unwrap();
        drop((second, third, other));
        assert_eq!(r.held(&a), 0.0);
        assert!(r.lock().held.is_empty(), "no entry left behind");
    }

    #[test]
    fn fractional_holds_leave_no_residue() {
        let r = Reservations::default();
        let t = Uuid::from_u128(3);
        let holds: Vec<Hold> = (0..10).map(|_| reserve(&r, t, 0.1, 1.0).unwrap()).collect();
        drop(holds);
        assert_eq!(r.held(&t), 0.0);
        assert!(reserve(&r, t, 1.0, 1.0).is_ok());
    }

    #[test]
    fn an_unreadable_balance_grants_nothing() {
        let r = Reservations::default();
        let t = Uuid::from_u128(4);
        let e = r
            .reserve(t, 1.0, || Err(ApiError::bad_request("x")))
            .unwrap_err();
        assert_eq!(e, Refused::Unreadable(ApiError::bad_request("x")));
        assert_eq!(r.held(&t), 0.0);
    }
}
