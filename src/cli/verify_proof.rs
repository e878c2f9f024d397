//! `auditmem verify --proof FILE` and `--consistency OLD NEW`: the transparency log's proofs,
//! checked offline against a pinned key (`crate::tlog::proof`).

use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context};
use serde::de::DeserializeOwned;

use crate::config::VerifyArgs;
use crate::tlog::proof::{self, ConsistencyProof, InclusionProof, ProofError};

pub fn run(args: &VerifyArgs) -> anyhow::Result<ExitCode> {
    for (given, flag) in [
        (args.expect_head.is_some(), "--expect-head"),
        (args.checkpoints.is_some(), "--checkpoints"),
        (args.manifest.is_some(), "--manifest"),
        (args.chain_only, "--chain-only"),
    ] {
        if given {
            bail!("{flag} does not apply to --proof or --consistency");
        }
    }
    let Some(pubkey) = args.pubkey.as_deref() else {
        bail!("--proof and --consistency need --pubkey: the log's key (`auditmem admin pubkey` prints it), so that a checkpoint signed by anyone else is refused");
    };
    let outcome = if let Some(file) = &args.proof {
        if args.consistency_proof.is_some() {
            bail!("--consistency-proof applies only to --consistency");
        }
        inclusion(file, pubkey, args)?
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
        consistency(old, new, proof_file, pubkey)?
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

/// The log's signed-note verifier key from `--pubkey`: a verifier key as is
/// (`<origin>+<id>+<base64>`), or the hex public key under the origin the note names.
fn log_key(pubkey: &str, note: &str) -> anyhow::Result<String> {
    let pubkey = pubkey.trim();
    if pubkey.contains('+') {
        return Ok(pubkey.to_string());
    }
    let key = crate::log::checkpoint::parse_public_key(pubkey).map_err(anyhow::Error::msg)?;
    let origin = note.lines().next().unwrap_or_default();
    Ok(crate::tlog::note::verifier_key(origin, &key))
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

fn inclusion(
    file: &Path,
    pubkey: &str,
    args: &VerifyArgs,
) -> anyhow::Result<Result<String, ProofError>> {
    let p: InclusionProof = read_json(file)?;
    let key = log_key(pubkey, p.checkpoint.as_deref().unwrap_or_default())?;
    let witnesses = witness_verifiers(&args.witness_keys)?;
    if args.witness_quorum > args.witness_keys.len() {
        bail!(
            "--witnesses {} asks for more cosignatures than the {} --witness-key given",
            args.witness_quorum,
            args.witness_keys.len()
        );
    }
    Ok(
        proof::check_inclusion(&p, &key, witnesses, args.witness_quorum).map(|ok| {
            let cosigned = if ok.witnesses.is_empty() {
                String::new()
            } else {
                format!("; cosigned by {}", ok.witnesses.join(", "))
            };
            format!(
                "audit entry {} is record {} (leaf {}) of the tree of size {} signed by {}{cosigned}",
                p.audit_id,
                ok.seq,
                ok.seq - 1,
                ok.tree_size,
                ok.origin
            )
        }),
    )
}

fn consistency(
    old: &Path,
    new: &Path,
    proof_file: &Path,
    pubkey: &str,
) -> anyhow::Result<Result<String, ProofError>> {
    let read =
        |p: &Path| std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()));
    let (old_note, new_note) = (read(old)?, read(new)?);
    let p: ConsistencyProof = read_json(proof_file)?;
    let key = log_key(pubkey, &new_note)?;
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
