//! What the two OpenAI-compatible clients (embeddings, chat completions) share: the blocking
//! HTTP client, the endpoint URL built from a configured base, and bounded error snippets.

use std::time::Duration;

use crate::http_client::ExtraRoots;

/// Enough of an error body to diagnose in the server log, without flooding it with an HTML
/// error page. Provider bodies never reach a tenant's answer or an audit entry.
pub(crate) const MAX_ERROR_BODY: usize = 300;

pub(crate) fn snippet(body: &str) -> String {
    let body = body.trim();
    match body.char_indices().nth(MAX_ERROR_BODY) {
        Some((cut, _)) => format!("{}…", &body[..cut]),
        None => body.to_string(),
    }
}

/// `{base}/v1/{path}`; a base that already ends in `/v1` (with or without a slash) is accepted.
pub(crate) fn endpoint(base_url: &str, path: &str) -> String {
    let base = base_url.trim_end_matches('/');
    let base = base.strip_suffix("/v1").unwrap_or(base);
    format!("{base}/v1/{path}")
}

/// A blocking client whose timeout covers the connection too, trusting the built-in roots and
/// `roots`, following no redirect (`crate::http_client`).
pub(crate) fn blocking_client(
    timeout: Duration,
    roots: &ExtraRoots,
) -> reqwest::Result<reqwest::blocking::Client> {
    crate::http_client::blocking(Some(timeout), roots)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snippet_cuts_long_bodies_on_char_boundaries() {
        let long = "é".repeat(1000);
        assert_eq!(snippet(&long).chars().count(), MAX_ERROR_BODY + 1);
    }

    #[test]
    fn endpoint_does_not_double_v1() {
        for base in [
            "http://h:1",
            "http://h:1/",
            "http://h:1/v1",
            "http://h:1/v1/",
        ] {
            assert_eq!(endpoint(base, "embeddings"), "http://h:1/v1/embeddings");
        }
    }
}
