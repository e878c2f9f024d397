//! Outgoing HTTP, built one way for every client of ours: the embedding and chat providers,
//! `auditmem verify --url` and `auditmem admin`.
//!
//! - **https through rustls**, trusting the Mozilla roots built into the binary (no system
//!   OpenSSL or certificate store needed) plus the certificates of an optional PEM bundle
//!   ([`ExtraRoots`]: `--provider-ca-file` for the providers, `--ca-file` for the CLI), for a
//!   private CA.
//! - **No redirect is followed**: a 3xx answer is the caller's failure. A redirect could take a
//!   provider key or the admin token to another host, or from https to http.
//! - **URLs in logs carry no credentials** ([`redacted`]): a provider's base URL may hold a user
//!   and password, or a key in its query.

use std::path::Path;
use std::time::Duration;

/// Certificates trusted besides the built-in roots, read from a PEM bundle.
#[derive(Clone, Debug, Default)]
pub struct ExtraRoots(Vec<reqwest::Certificate>);

impl ExtraRoots {
    /// The certificates of the PEM bundle at `path`, if one is given. A bundle that cannot be
    /// read or holds no certificate is an error, so that a mistyped path never quietly leaves a
    /// private CA untrusted.
    pub fn load(path: Option<&Path>) -> Result<Self, String> {
        let Some(path) = path else {
            return Ok(Self::default());
        };
        let pem = std::fs::read(path)
            .map_err(|e| format!("reading the CA bundle {}: {e}", path.display()))?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
            format!(
                "the CA bundle {} is not PEM certificates: {}",
                path.display(),
                chain(&e)
            )
        })?;
        if certs.is_empty() {
            return Err(format!(
                "the CA bundle {} holds no PEM certificate",
                path.display()
            ));
        }
        Ok(Self(certs))
    }

    /// How many certificates the bundle added.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A blocking client trusting the built-in roots and `roots`, following no redirect; `timeout`
/// covers each request whole, its connection included (`None`: no limit, for long streams).
pub fn blocking(
    timeout: Option<Duration>,
    roots: &ExtraRoots,
) -> reqwest::Result<reqwest::blocking::Client> {
    let mut builder = reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(timeout);
    if let Some(t) = timeout {
        builder = builder.connect_timeout(t);
    }
    for cert in &roots.0 {
        builder = builder.add_root_certificate(cert.clone());
    }
    builder.build()
}

/// `url` as logs show it: scheme, host, port and path. User, password, query and fragment are
/// left out, as credentials travel there.
pub fn redacted(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) => {
            let mut shown = format!("{}://{}", u.scheme(), u.host_str().unwrap_or(""));
            if let Some(port) = u.port() {
                shown.push_str(&format!(":{port}"));
            }
            shown.push_str(u.path());
            shown
        }
        Err(_) => "(a URL that does not parse)".to_string(),
    }
}

/// An error and its sources, `: `-separated (reqwest names only the outermost, "error sending
/// request", in its own text; the cause, a refused connection or an unknown certificate issuer,
/// is in the sources). Callers strip the URL first (`reqwest::Error::without_url`).
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        // Some layers repeat their source's text in their own.
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}

/// What a 3xx answer says, for the log: where it pointed, redacted.
pub fn refused_redirect(
    status: reqwest::StatusCode,
    headers: &reqwest::header::HeaderMap,
) -> String {
    let to = headers
        .get(reqwest::header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .map_or_else(|| "nowhere".to_string(), redacted);
    format!(
        "HTTP {}: a redirect (to {to}), which is not followed",
        status.as_u16()
    )
}

/// Sends a command-line request to the server at `base`: a transport failure names the server
/// without its credentials, and a redirect is refused rather than followed (the CLI carries the
/// admin token).
pub fn send(
    req: reqwest::blocking::RequestBuilder,
    base: &str,
    path: &str,
) -> anyhow::Result<reqwest::blocking::Response> {
    let resp = req
        .send()
        .map_err(|e| anyhow::anyhow!("reaching {}: {}", redacted(base), chain(&e.without_url())))?;
    let status = resp.status();
    if status.is_redirection() {
        anyhow::bail!("{path}: {}", refused_redirect(status, resp.headers()));
    }
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacted_urls_keep_no_credentials() {
        assert_eq!(
            redacted("https://user:s3cret@llm.example:8443/v1/chat/completions?key=abc#x"),
            "https://llm.example:8443/v1/chat/completions"
        );
        assert_eq!(
            redacted("http://127.0.0.1/v1/embeddings"),
            "http://127.0.0.1/v1/embeddings"
        );
        assert_eq!(redacted("http://[::1]:9/v1"), "http://[::1]:9/v1");
        assert_eq!(redacted("not a url"), "(a URL that does not parse)");
    }

    #[test]
    fn a_missing_or_empty_ca_bundle_is_an_error() {
        assert_eq!(ExtraRoots::load(None).map(|r| r.len()), Ok(0));
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let e = ExtraRoots::load(Some(&missing)).unwrap_err();
        assert!(e.starts_with("reading the CA bundle"), "{e}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "no certificate here\n").unwrap();
        let e = ExtraRoots::load(Some(&empty)).unwrap_err();
        assert!(e.contains("holds no PEM certificate"), "{e}");
    }

    #[test]
    fn a_redirect_is_named_with_its_target_redacted() {
        let mut h = reqwest::header::HeaderMap::new();
        h.insert(
            reqwest::header::LOCATION,
            "https://u:p@elsewhere.example/x?token=1".parse().unwrap(),
        );
        assert_eq!(
            refused_redirect(reqwest::StatusCode::FOUND, &h),
            "HTTP 302: a redirect (to https://elsewhere.example/x), which is not followed"
        );
    }
}
