//! Export tasks, folded from `ExportRequested`, `ExportCompleted`, `ExportFailed`.
//!
//! Tree `proj_exports`: `e|export_id` → [`ExportView`]; `p|tenant_id|export_id` → () while the
//! export is processing (at most one per tenant: the handler's precondition sees to it).
//!
//! In memory, per tenant, the [`Usage`] of the exports its quotas count: those processing,
//! those completed and not yet expired (their files are live), and those requested within the
//! last [`RECENT_MICROS`] (the per-hour quota). It is rebuilt from the tree at open; an export
//! that is none of these can never count again (time only moves on), so it is dropped.

use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::event::{ChainPoint, Event, ExportFormat};
use crate::overlay::{fold_new, prefixed, Overlay};
use crate::projection::{corrupt, Applied, Projection, Result};
use crate::FastMap;

pub const TREE: &str = "proj_exports";

/// How far back the exports a tenant started are kept in memory: the per-hour quota's window.
pub const RECENT_MICROS: i64 = 3_600 * 1_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExportStatus {
    Processing,
    Completed,
    Failed,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExportView {
    pub export_id: Uuid,
    pub tenant_id: Uuid,
    pub format: ExportFormat,
    pub start_time: i64,
    pub end_time: i64,
    pub estimated_records: u64,
    pub with_chain: bool,
    /// Seq of the `ExportRequested` record: the export holds entries logged before it.
    pub request_seq: u64,
    pub status: ExportStatus,
    pub records: Option<u64>,
    pub file_size: Option<u64>,
    pub file_blake3: Option<String>,
    pub created_at: i64,
    pub completed_at: Option<i64>,
    pub expires_at: Option<i64>,
    pub error: Option<String>,
    /// The first and last row's place in the tenant chain (exports that show it).
    #[serde(default)]
    pub first: Option<ChainPoint>,
    #[serde(default)]
    pub last: Option<ChainPoint>,
    /// Whether CSV text cells that would start a formula carry a leading `'`.
    #[serde(default)]
    pub formula_guard: bool,
}

impl ExportView {
    /// Whether the export's file is past its expiry at `now` (micros).
    pub fn expired(&self, now: i64) -> bool {
        self.status == ExportStatus::Completed && self.expires_at.is_some_and(|t| t <= now)
    }
}

/// What an export counts for its tenant's quotas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    pub export_id: Uuid,
    pub requested_at: i64,
    pub status: ExportStatus,
    /// The file's size once completed.
    pub bytes: u64,
    pub expires_at: Option<i64>,
}

impl Usage {
    fn of(v: &ExportView) -> Self {
        Usage {
            export_id: v.export_id,
            requested_at: v.created_at,
            status: v.status,
            bytes: v.file_size.unwrap_or(0),
            expires_at: v.expires_at,
        }
    }

    /// Whether its file exists or is being written at `now`: processing, or completed and
    /// not expired.
    pub fn live(&self, now: i64) -> bool {
        match self.status {
            ExportStatus::Processing => true,
            ExportStatus::Completed => self.expires_at.is_some_and(|t| t > now),
            ExportStatus::Failed => false,
        }
    }

    /// Whether it can still count for a quota at `now` or later.
    fn counts(&self, now: i64) -> bool {
        self.live(now) || self.requested_at > now - RECENT_MICROS
    }
}

pub struct Exports {
    tree: sled::Tree,
    usage: Mutex<FastMap<Uuid, Vec<Usage>>>,
}

fn dec(bytes: &[u8]) -> Result<ExportView> {
    rmp_serde::from_slice(bytes).map_err(|e| corrupt(TREE, format!("export: {e}")))
}

fn enc(v: &ExportView) -> Vec<u8> {
    // Plain struct of integers and strings: encoding into a Vec cannot fail.
    rmp_serde::to_vec_named(v).unwrap_or_default()
}

fn now_micros() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

impl Exports {
    pub fn open(db: &sled::Db) -> Result<Self> {
        let tree = db.open_tree(TREE)?;
        let now = now_micros();
        let mut usage: FastMap<Uuid, Vec<Usage>> = FastMap::default();
        for kv in tree.scan_prefix([b'e']) {
            let (_, v) = kv?;
            let view = dec(&v)?;
            let u = Usage::of(&view);
            if u.counts(now) {
                usage.entry(view.tenant_id).or_default().push(u);
            }
        }
        Ok(Self {
            tree,
            usage: Mutex::new(usage),
        })
    }

    /// The exports of `tenant` that count for its quotas at `now` (see the module doc), oldest
    /// request first.
    pub fn usage_of(&self, tenant: &Uuid, now: i64) -> Vec<Usage> {
        let mut map = self.usage.lock().unwrap_or_else(|p| p.into_inner());
        let Some(list) = map.get_mut(tenant) else {
            return Vec::new();
        };
        list.retain(|u| u.counts(now));
        let mut out = list.clone();
        if list.is_empty() {
            map.remove(tenant);
        }
        out.sort_by_key(|u| (u.requested_at, u.export_id));
        out
    }

    /// Folds the views a committed batch changed into the in-memory usage.
    fn remember(&self, changed: Vec<ExportView>) {
        let mut map = self.usage.lock().unwrap_or_else(|p| p.into_inner());
        for v in changed {
            let list = map.entry(v.tenant_id).or_default();
            let u = Usage::of(&v);
            match list.iter_mut().find(|x| x.export_id == v.export_id) {
                Some(x) => *x = u,
                None => list.push(u),
            }
        }
    }

    pub fn get(&self, id: &Uuid) -> Result<Option<ExportView>> {
        self.tree
            .get(prefixed(b'e', &[id.as_bytes()]))?
            .map(|v| dec(&v))
            .transpose()
    }

    /// The tenant's export still processing, if any.
    pub fn processing_of(&self, tenant: &Uuid) -> Result<Option<Uuid>> {
        match self
            .tree
            .scan_prefix(prefixed(b'p', &[tenant.as_bytes()]))
            .next()
        {
            None => Ok(None),
            Some(kv) => {
                let (k, _) = kv?;
                let id: [u8; 16] = k[17..]
                    .try_into()
                    .map_err(|_| corrupt(TREE, "processing key"))?;
                Ok(Some(Uuid::from_bytes(id)))
            }
        }
    }

    /// Every completed export whose file has not expired at `now`: what a cluster node writes
    /// its own copy of (the file is a function of the log up to the request).
    pub fn live_completed(&self, now: i64) -> Result<Vec<ExportView>> {
        let mut out = Vec::new();
        for kv in self.tree.scan_prefix([b'e']) {
            let (_, v) = kv?;
            let v: ExportView = dec(&v)?;
            if v.status == ExportStatus::Completed && !v.expired(now) {
                out.push(v);
            }
        }
        Ok(out)
    }

    /// Every export still processing (what a restart must resume).
    pub fn processing(&self) -> Result<Vec<ExportView>> {
        let mut out = Vec::new();
        for kv in self.tree.scan_prefix([b'p']) {
            let (k, _) = kv?;
            let id: [u8; 16] = k[17..]
                .try_into()
                .map_err(|_| corrupt(TREE, "processing key"))?;
            if let Some(v) = self.get(&Uuid::from_bytes(id))? {
                out.push(v);
            }
        }
        Ok(out)
    }

    fn finish(
        ov: &mut Overlay<'_>,
        id: &Uuid,
        update: impl FnOnce(&mut ExportView),
    ) -> Result<Option<ExportView>> {
        let key = prefixed(b'e', &[id.as_bytes()]);
        if let Some(bytes) = ov.get(&key)? {
            let mut v = dec(&bytes)?;
            if v.status != ExportStatus::Processing {
                return Ok(None);
            }
            update(&mut v);
            ov.remove(prefixed(b'p', &[v.tenant_id.as_bytes(), id.as_bytes()]));
            ov.insert(key, enc(&v));
            return Ok(Some(v));
        }
        Ok(None)
    }
}

impl Projection for Exports {
    fn name(&self) -> &'static str {
        TREE
    }

    fn tree(&self) -> &sled::Tree {
        &self.tree
    }

    fn apply(&self, events: &[Applied<'_>]) -> Result<()> {
        let mut changed = Vec::new();
        let folded = fold_new(&self.tree, TREE, events, |ov, a| {
            match a.event {
                Event::ExportRequested(e) => {
                    let v = ExportView {
                        export_id: e.export_id,
                        tenant_id: e.tenant_id,
                        format: e.format,
                        start_time: e.start_time,
                        end_time: e.end_time,
                        estimated_records: e.estimated_records,
                        with_chain: e.with_chain,
                        request_seq: a.seq,
                        status: ExportStatus::Processing,
                        records: None,
                        file_size: None,
                        file_blake3: None,
                        created_at: e.requested_at,
                        completed_at: None,
                        expires_at: None,
                        error: None,
                        first: None,
                        last: None,
                        formula_guard: false,
                    };
                    ov.insert(prefixed(b'e', &[e.export_id.as_bytes()]), enc(&v));
                    ov.insert(
                        prefixed(b'p', &[e.tenant_id.as_bytes(), e.export_id.as_bytes()]),
                        Vec::new(),
                    );
                    changed.push(v);
                }
                Event::ExportCompleted(e) => changed.extend(Self::finish(ov, &e.export_id, |v| {
                    v.status = ExportStatus::Completed;
                    v.records = Some(e.records);
                    v.file_size = Some(e.bytes);
                    v.file_blake3 = Some(blake3::Hash::from(e.blake3).to_hex().to_string());
                    v.completed_at = Some(e.completed_at);
                    v.expires_at = Some(e.expires_at);
                    v.first = e.first;
                    v.last = e.last;
                    v.formula_guard = e.formula_guard;
                })?),
                Event::ExportFailed(e) => changed.extend(Self::finish(ov, &e.export_id, |v| {
                    v.status = ExportStatus::Failed;
                    v.error = Some(e.error.clone());
                    v.completed_at = Some(e.failed_at);
                })?),
                _ => {}
            }
            Ok(())
        })?;
        if let Some((ov, last)) = folded {
            ov.commit(last)?;
            self.remember(changed);
        }
        Ok(())
    }

    fn reset(&self) -> Result<()> {
        self.tree.clear()?;
        self.usage.lock().unwrap_or_else(|p| p.into_inner()).clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{ExportCompleted, ExportFailed, ExportRequested};

    #[test]
    fn given_a_request_and_its_completion_then_the_view_follows() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = sled::open(dir.path()).expect("open");
        let p = Exports::open(&db).expect("open");
        let (id, tenant) = (Uuid::now_v7(), Uuid::now_v7());
        let req = Event::ExportRequested(ExportRequested {
            export_id: id,
            tenant_id: tenant,
            format: ExportFormat::Csv,
            start_time: 0,
            end_time: 10,
            estimated_records: 3,
            with_chain: true,
            requested_at: 5,
        });
        p.apply(&[Applied::at(7, &req)]).expect("apply");
        assert_eq!(p.processing_of(&tenant).expect("read"), Some(id));
        let v = p.get(&id).expect("read").expect("view");
        assert_eq!((v.status, v.request_seq), (ExportStatus::Processing, 7));
        let done = Event::ExportCompleted(ExportCompleted {
            export_id: id,
            tenant_id: tenant,
            records: 3,
            bytes: 99,
            blake3: [1; 32],
            completed_at: 8,
            expires_at: 9,
            first: Some(ChainPoint {
                audit_id: Uuid::from_u128(1),
                chain_index: 1,
                hash: [2; 32],
            }),
            last: Some(ChainPoint {
                audit_id: Uuid::from_u128(3),
                chain_index: 3,
                hash: [4; 32],
            }),
            formula_guard: true,
        });
        p.apply(&[Applied::at(8, &done)]).expect("apply");
        let v = p.get(&id).expect("read").expect("view");
        assert_eq!(
            (v.status, v.records, v.file_size),
            (ExportStatus::Completed, Some(3), Some(99))
        );
        assert_eq!(p.processing_of(&tenant).expect("read"), None);
        assert!(p.processing().expect("read").is_empty());
        assert_eq!(
            (
                v.first.map(|c| c.chain_index),
                v.last.map(|c| c.hash),
                v.formula_guard
            ),
            (Some(1), Some([4; 32]), true)
        );
    }

    fn requested(id: Uuid, tenant: Uuid, at: i64) -> Event {
        Event::ExportRequested(ExportRequested {
            export_id: id,
            tenant_id: tenant,
            format: ExportFormat::Csv,
            start_time: 0,
            end_time: 10,
            estimated_records: 3,
            with_chain: false,
            requested_at: at,
        })
    }

    #[test]
    fn given_exports_of_every_state_then_usage_keeps_those_that_still_count() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = sled::open(dir.path()).expect("open");
        let p = Exports::open(&db).expect("open");
        let (tenant, other) = (Uuid::now_v7(), Uuid::now_v7());
        let now = now_micros();
        let hour = RECENT_MICROS;
        let ids: Vec<Uuid> = (0..5).map(|_| Uuid::now_v7()).collect();
        let done = |id: Uuid, bytes: u64, expires_at: i64| {
            Event::ExportCompleted(ExportCompleted {
                export_id: id,
                tenant_id: tenant,
                records: 1,
                bytes,
                blake3: [0; 32],
                completed_at: now - 2 * hour,
                expires_at,
                first: None,
                last: None,
                formula_guard: true,
            })
        };
        let events = vec![
            // Long ago, expired: counts for nothing.
            requested(ids[0], tenant, now - 3 * hour),
            done(ids[0], 10, now - hour),
            // Long ago, still live: its file counts.
            requested(ids[1], tenant, now - 3 * hour),
            done(ids[1], 20, now + hour),
            // Failed within the hour: counts as started.
            requested(ids[2], tenant, now - hour / 2),
            Event::ExportFailed(ExportFailed {
                export_id: ids[2],
                tenant_id: tenant,
                error: "x".into(),
                failed_at: now,
            }),
            // Processing: live.
            requested(ids[3], tenant, now - 1),
            // Another tenant's.
            requested(ids[4], other, now),
        ];
        p.apply(&Applied::in_order(&events)).expect("apply");
        let kept: Vec<(Uuid, bool, u64)> = p
            .usage_of(&tenant, now)
            .iter()
            .map(|u| (u.export_id, u.live(now), u.bytes))
            .collect();
        let want = vec![(ids[1], true, 20), (ids[2], false, 0), (ids[3], true, 0)];
        assert_eq!(kept, want);
        // Rebuilt the same from the tree at open.
        drop(p);
        let p = Exports::open(&db).expect("reopen");
        let again: Vec<(Uuid, bool, u64)> = p
            .usage_of(&tenant, now)
            .iter()
            .map(|u| (u.export_id, u.live(now), u.bytes))
            .collect();
        assert_eq!(again, want);
        assert_eq!(p.usage_of(&other, now).len(), 1);
        // Past the file's expiry and the hour, nothing of the three finished ones counts.
        let later = now + 2 * hour;
        let left: Vec<Uuid> = p
            .usage_of(&tenant, later)
            .iter()
            .map(|u| u.export_id)
            .collect();
        assert_eq!(left, vec![ids[3]]);
    }
}
