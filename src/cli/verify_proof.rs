//! `auditmem verify --proof FILE`, `--export-proofs FILE [--export EXPORT]` and
//! `--consistency OLD NEW`: the transparency log's proofs, checked offline against a pinned key
//! (`crate::tlog::proof`).

use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context};
use serde::de::DeserializeOwned;

use crate::config::VerifyArgs;
use crate::log::checkpoint::PinnedKey;
use crate::tlog::proof::{
    self, ConsistencyProof, ErasureProof, ExportProofsHead, InclusionProof, ProofError,
};

pub fn run(args: &VerifyArgs) -> anyhow::Result<ExitCode> {
    for (given, flag) in [
        (args.expect_head.is_some(), "--expect-head"),
        (args.checkpoints.is_some(), "--checkpoints"),
        (args.manifest.is_some(), "--manifest"),
        (args.chain_only, "--chain-only"),
    ] {
        if given {
            bail!("{flag} does not apply to --proof, --consistency or --export-proofs (check an export against its manifest with a separate `verify --export FILE --manifest M`)");
        }
    }
    let Some(pubkey) = super::verify::pinned_key(args)? else {
        bail!("--proof, --consistency and --export-proofs need --pubkey: the log's key (`auditmem admin pubkey` prints it), so that a checkpoint signed by anyone else is refused");
    };
    let outcome = if let Some(file) = &args.export_proofs {
        if args.consistency_proof.is_some() {
            bail!("--consistency-proof applies only to --consistency");
        }
        export_proofs(file, args.export.as_deref(), &pubkey, args)?
    } else if let Some(file) = &args.proof {
        if args.consistency_proof.is_some() {
            bail!("--consistency-proof applies only to --consistency");
        }
        inclusion(file, &pubkey, args)?
    } else if let Some(files) = &args.consistency {
        if !args.witness_keys.is_empty() || args.witness_quorum > 0 {
            bail!("--witness-key and --witnesses apply only to --proof FILE");
        }
        let [old, new] = files.as_slice() else {
            bail!("--consistency takes two checkpoint files, OLD and NEW");
        };
        let Some(proof_file) = &args.consistency_proof else {
            bail!("--consistency needs --consistency-proof FILE: the answer of GET /v1/audit/consistency?from=OLD&to=NEW");
        };
        consistency(old, new, proof_file, &pubkey)?
    } else {
        bail!("give --proof FILE or --consistency OLD NEW");
    };
    let (ok, message) = match outcome {
        Ok(m) => (true, m),
        Err(e) => (false, e.to_string()),
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({"clean": ok, "message": message}))?
        );
    } else if ok {
        println!("OK: {message}");
    } else {
        println!("FAILED: {message}");
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// A JSON file holding `T`, bare or in the API's envelope (`{"data": T, ...}`).
fn read_json<T: DeserializeOwned>(path: &Path) -> anyhow::Result<T> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    if let Some(data) = v.get_mut("data") {
        v = data.take();
    }
    serde_json::from_value(v).with_context(|| format!("{} is not a proof", path.display()))
}

/// The log's signed-note verifier key from `--pubkey`: as given when it was given as a
/// verifier key, or the hex key under the origin the note names.
fn log_key(pubkey: &PinnedKey, note: &str) -> String {
    pubkey.verifier_key(note.lines().next().unwrap_or_default())
}

fn witness_verifiers(keys: &[String]) -> anyhow::Result<Vec<Box<dyn signed_note::Verifier>>> {
    keys.iter()
        .map(|k| {
            crate::tlog::cosignature::CosignatureVerifier::new(k.trim())
                .map(|v| Box::new(v) as Box<dyn signed_note::Verifier>)
                .map_err(|e| anyhow::anyhow!("--witness-key {k:?}: {e}"))
        })
        .collect()
}

/// `--export-proofs FILE [--export EXPORT]`.
fn export_proofs(
    file: &Path,
    export: Option<&Path>,
    pubkey: &PinnedKey,
    args: &VerifyArgs,
) -> anyhow::Result<Result<String, ProofError>> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let Some((_, first)) = lines.next() else {
        bail!("{} is empty", file.display());
    };
    let head: ExportProofsHead = serde_json::from_str(first)
        .with_context(|| format!("line 1 of {} is not an export proofs head", file.display()))?;
    let key = log_key(pubkey, &head.checkpoint);
    let witnesses = witness_verifiers(&args.witness_keys)?;
    check_quorum(args)?;
    let opened = match crate::tlog::note::open(
        head.checkpoint.as_bytes(),
        &key,
        witnesses,
        args.witness_quorum,
    ) {
        Ok(o) => o,
        Err(e) => return Ok(Err(e.into())),
    };
    if opened.size != head.tree_size || opened.root.to_string() != head.root_hash {
        return Ok(Err(ProofError::CheckpointMismatch {
            cp_size: opened.size,
            cp_root: opened.root.to_string(),
            size: head.tree_size,
            root: head.root_hash,
        }));
    }
    let mut ids = Vec::new();
    for (row, (i, line)) in (1u64..).zip(lines) {
        let p: InclusionProof = serde_json::from_str(line)
            .with_context(|| format!("line {} of {} is not a proof", i + 1, file.display()))?;
        let checked = if p.tree_size != opened.size || p.root_hash != head.root_hash {
            Err(ProofError::Malformed(format!(
                "its proof is for tree size {}, the head's is {}",
                p.tree_size, opened.size
            )))
        } else {
            proof::check_record_in(&p, &opened.root)
        };
        if let Err(why) = checked {
            return Ok(Err(ProofError::Row {
                row,
                audit_id: p.audit_id.to_string(),
                why: Box::new(why),
            }));
        }
        ids.push(p.audit_id.to_string());
    }
    if ids.len() as u64 != head.rows {
        return Ok(Err(ProofError::RowsDiffer(format!(
            "the head says {} rows, {} proofs follow",
            head.rows,
            ids.len()
        ))));
    }
    let mut of_file = String::new();
    if let Some(export) = export {
        let rows = export_ids(export)?;
        if let Some(i) = (0..rows.len().max(ids.len())).find(|&i| rows.get(i) != ids.get(i)) {
            return Ok(Err(ProofError::RowsDiffer(format!(
                "row {} of {} is {}, its proof is for {}",
                i + 1,
                export.display(),
                rows.get(i).map_or("missing", String::as_str),
                ids.get(i).map_or("nothing", String::as_str)
            ))));
        }
        of_file = format!(", the rows of {} in its order", export.display());
    }
    let cosigned = if opened.witnesses.is_empty() {
        String::new()
    } else {
        format!("; cosigned by {}", opened.witnesses.join(", "))
    };
    Ok(Ok(format!(
        "{} rows of export {}{of_file} are records of the tree of size {} signed by {}{cosigned}",
        ids.len(),
        head.export_id,
        opened.size,
        opened.origin
    )))
}

/// The audit ids of an export file's rows, in order (CSV or JSON, as the service writes them).
fn export_ids(path: &Path) -> anyhow::Result<Vec<String>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let rows: Vec<serde_json::Map<String, serde_json::Value>> = if bytes.first() == Some(&b'[') {
        serde_json::from_slice(&bytes)
            .with_context(|| format!("{} is not a JSON export", path.display()))?
    } else {
        crate::export::rows::parse(&bytes)
            .map_err(|e| anyhow::anyhow!("{} is not a CSV export: {e}", path.display()))?
    };
    rows.iter()
        .enumerate()
        .map(|(i, r)| {
            r.get("id")
                .and_then(|v| v.as_str())
                .map(str::to_string)
                .with_context(|| format!("row {} of {} has no id", i + 1, path.display()))
        })
        .collect()
}

fn check_quorum(args: &VerifyArgs) -> anyhow::Result<()> {
    if args.witness_quorum > args.witness_keys.len() {
        bail!(
            "--witnesses {} asks for more cosignatures than the {} --witness-key given",
            args.witness_quorum,
            args.witness_keys.len()
        );
    }
    Ok(())
}

/// `--proof FILE`: an audit entry's inclusion proof, or an erasure's (the `proof` of an
/// erasure receipt, or the whole receipt).
fn inclusion(
    file: &Path,
    pubkey: &PinnedKey,
    args: &VerifyArgs,
) -> anyhow::Result<Result<String, ProofError>> {
    let v: serde_json::Value = read_json(file)?;
    let erasure = match (v.get("erasure_id"), v.get("proof")) {
        (_, Some(p)) if p.get("erasure_id").is_some() => Some(p.clone()),
        (Some(_), _) => Some(v.clone()),
        _ => None,
    };
    let witnesses = witness_verifiers(&args.witness_keys)?;
    check_quorum(args)?;
    let described = |ok: proof::IncludedIn, what: String| {
        let cosigned = if ok.witnesses.is_empty() {
            String::new()
        } else {
            format!("; cosigned by {}", ok.witnesses.join(", "))
        };
        format!(
            "{what} is record {} (leaf {}) of the tree of size {} signed by {}{cosigned}",
            ok.seq,
            ok.seq - 1,
            ok.tree_size,
            ok.origin
        )
    };
    if let Some(e) = erasure {
        let p: ErasureProof = serde_json::from_value(e)
            .with_context(|| format!("{} is not an erasure proof", file.display()))?;
        let key = log_key(pubkey, &p.checkpoint);
        return Ok(
            proof::check_erasure_inclusion(&p, &key, witnesses, args.witness_quorum)
                .map(|ok| described(ok, format!("erasure {}", p.erasure_id))),
        );
    }
    let p: InclusionProof =
        serde_json::from_value(v).with_context(|| format!("{} is not a proof", file.display()))?;
    let key = log_key(pubkey, p.checkpoint.as_deref().unwrap_or_default());
    Ok(
        proof::check_inclusion(&p, &key, witnesses, args.witness_quorum)
            .map(|ok| described(ok, format!("audit entry {}", p.audit_id))),
    )
}

fn consistency(
    old: &Path,
    new: &Path,
    proof_file: &Path,
    pubkey: &PinnedKey,
) -> anyhow::Result<Result<String, ProofError>> {
    let read =
        |p: &Path| std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()));
    let (old_note, new_note) = (read(old)?, read(new)?);
    let p: ConsistencyProof = read_json(proof_file)?;
    let key = log_key(pubkey, &new_note);
    Ok(
        proof::check_consistency(old_note.as_bytes(), new_note.as_bytes(), &p.proof, &key)
            .and_then(|(a, b)| {
                if (p.from, p.to) != (a.size, b.size) {
                    return Err(ProofError::Malformed(format!(
                        "the proof is from tree size {} to {}, the checkpoints are of sizes {} and {}",
                        p.from, p.to, a.size, b.size
                    )));
                }
                Ok(format!(
                    "the tree of size {} (checkpoint {}) is a prefix of the tree of size {} (checkpoint {}), both signed by {}",
                    a.size,
                    old.display(),
                    b.size,
                    new.display(),
                    b.origin
                ))
            }),
    )
}
