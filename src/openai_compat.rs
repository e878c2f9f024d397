//! What the two OpenAI-compatible clients (embeddings, chat completions) share: the blocking
//! HTTP client, the endpoint URL built from a configured base, and bounded error snippets.

use std::time::Duration;

/// Enough of an error body to diagnose, without flooding logs with an HTML error page.
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

/// A blocking client whose timeout covers the connection too.
pub(crate) fn blocking_client(timeout: Duration) -> reqwest::Result<reqwest::blocking::Client> {
    reqwest::blocking::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        .build()
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
