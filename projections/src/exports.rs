//! Export tasks, folded from `ExportRequested`, `ExportCompleted`, `ExportFailed`.
//!
//! Tree `proj_exports`: `e|export_id` → [`ExportView`]; `p|tenant_id|export_id` → () while the
//! export is processing (at most one per tenant: the handler's precondition sees to it).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::event::{Event, ExportFormat};
use crate::overlay::{fold_new, prefixed, Overlay};
use crate::projection::{corrupt, Applied, Projection, Result};

pub const TREE: &str = "proj_exports";

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
}

pub struct Exports {
    tree: sled::Tree,
}

fn dec(bytes: &[u8]) -> Result<ExportView> {
    rmp_serde::from_slice(bytes).map_err(|e| corrupt(TREE, format!("export: {e}")))
}

fn enc(v: &ExportView) -> Vec<u8> {
    // Plain struct of integers and strings: encoding into a Vec cannot fail.
    rmp_serde::to_vec_named(v).unwrap_or_default()
}

impl Exports {
    pub fn open(db: &sled::Db) -> Result<Self> {
        Ok(Self {
            tree: db.open_tree(TREE)?,
        })
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

    fn finish(ov: &mut Overlay<'_>, id: &Uuid, update: impl FnOnce(&mut ExportView)) -> Result<()> {
        let key = prefixed(b'e', &[id.as_bytes()]);
        if let Some(bytes) = ov.get(&key)? {
            let mut v = dec(&bytes)?;
            if v.status != ExportStatus::Processing {
                return Ok(());
            }
            update(&mut v);
            ov.remove(prefixed(b'p', &[v.tenant_id.as_bytes(), id.as_bytes()]));
            ov.insert(key, enc(&v));
        }
        Ok(())
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
                    };
                    ov.insert(prefixed(b'e', &[e.export_id.as_bytes()]), enc(&v));
                    ov.insert(
                        prefixed(b'p', &[e.tenant_id.as_bytes(), e.export_id.as_bytes()]),
                        Vec::new(),
                    );
                }
                Event::ExportCompleted(e) => Self::finish(ov, &e.export_id, |v| {
                    v.status = ExportStatus::Completed;
                    v.records = Some(e.records);
                    v.file_size = Some(e.bytes);
                    v.file_blake3 = Some(blake3::Hash::from(e.blake3).to_hex().to_string());
                    v.completed_at = Some(e.completed_at);
                    v.expires_at = Some(e.expires_at);
                })?,
                Event::ExportFailed(e) => Self::finish(ov, &e.export_id, |v| {
                    v.status = ExportStatus::Failed;
                    v.error = Some(e.error.clone());
                    v.completed_at = Some(e.failed_at);
                })?,
                _ => {}
            }
            Ok(())
        })?;
        if let Some((ov, last)) = folded {
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
    use crate::event::{ExportCompleted, ExportRequested};

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
        });
        p.apply(&[Applied::at(8, &done)]).expect("apply");
        let v = p.get(&id).expect("read").expect("view");
        assert_eq!(
            (v.status, v.records, v.file_size),
            (ExportStatus::Completed, Some(3), Some(99))
        );
        assert_eq!(p.processing_of(&tenant).expect("read"), None);
        assert!(p.processing().expect("read").is_empty());
    }
}
