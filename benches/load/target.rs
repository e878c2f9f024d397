//! The server under load (a child process of ours, or one given by URL) and its admin API.

use std::path::Path;
use std::process::{Child, Command, Stdio};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::measure::Rss;
use crate::seed::TenantKey;

/// The server under load: a child process of ours, or one given by URL.
pub(crate) struct Target {
    pub(crate) url: String,
    pub(crate) child: Option<Child>,
}

impl Target {
    pub(crate) fn spawn(dir: &Path, admin_token: &str, extra: &[String]) -> Result<Target> {
        let keys = dir.join("keys");
        let mut child = Command::new(env!("CARGO_BIN_EXE_auditmem"))
            .arg("serve")
            .arg("--data-dir")
            .arg(dir.join("data"))
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--signing-key")
            .arg(keys.join("signing.key"))
            .arg("--checkpoints-file")
            .arg(keys.join("checkpoints.ndjson"))
            .args(extra)
            .env("AUDITMEM_ADMIN_TOKEN", admin_token)
            .env("AUDITMEM_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting auditmem serve")?;
        let url = auditmem::cli::serve::wait_listening(&mut child)?;
        Ok(Target {
            url,
            child: Some(child),
        })
    }

    /// Resident and peak resident memory of the server, MiB (only for a child of ours).
    pub(crate) fn rss(&self) -> Option<Rss> {
        rss_of(self.pid()?)
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        Some(self.child.as_ref()?.id())
    }
}

/// Resident and peak resident memory of a process, MiB.
pub(crate) fn rss_of(pid: u32) -> Option<Rss> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<f64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb / 1024.0)
    };
    Some(Rss {
        rss_mib: field("VmRSS:")?,
        peak_mib: field("VmHWM:")?,
    })
}

impl Target {
    pub(crate) fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGTERM: the server drains and signs a last checkpoint, so the dir stays reusable.
            if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
            let _ = child.wait();
        }
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        self.stop();
    }
}

pub(crate) struct Admin {
    pub(crate) client: reqwest::Client,
    pub(crate) url: String,
    pub(crate) token: String,
}

/// POSTs `body` and returns the `data` of a success envelope.
pub(crate) async fn post_data(
    client: &reqwest::Client,
    url: String,
    bearer: &str,
    body: &Value,
) -> Result<Value> {
    let resp = client
        .post(&url)
        .bearer_auth(bearer)
        .json(body)
        .send()
        .await?;
    let status = resp.status();
    let v: Value = resp.json().await?;
    if !status.is_success() {
        bail!("POST {url}: {status} {v}");
    }
    Ok(v["data"].clone())
}

impl Admin {
    pub(crate) async fn post(&self, path: &str, body: Value) -> Result<Value> {
        post_data(
            &self.client,
            format!("{}{path}", self.url),
            &self.token,
            &body,
        )
        .await
    }

    pub(crate) async fn tenant(
        &self,
        name: &str,
        plan: &str,
        permissions: &[&str],
    ) -> Result<TenantKey> {
        let t = self
            .post(
                "/admin/v1/tenants",
                json!({"name": name, "plan": plan, "credits": 1.0e9}),
            )
            .await?;
        let id = t["id"].as_str().context("tenant id")?.to_string();
        let k = self
            .post(
                &format!("/admin/v1/tenants/{id}/keys"),
                json!({"permissions": permissions}),
            )
            .await?;
        let key = k["api_key"].as_str().context("api key")?.to_string();
        Ok(TenantKey { id, key })
    }
}
