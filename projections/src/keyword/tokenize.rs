//! The one tokenizer of documents and queries: a query matches only what the same function
//! made of a memory's text.
//!
//! Text is lowercased (Unicode) and cut into *words*: maximal runs of alphanumerics joined by
//! connectors (`-`, `_`, `.`, `/`, `:`, `#`, `@`, `+`), trimmed of connectors at either end
//! (so a sentence's full stop is not part of its last word). Each word gives its *parts* (the
//! alphanumeric runs) and, when it has several parts and looks like an identifier, the whole
//! word too: `ERR_CONN_RESET` gives `err`, `conn`, `reset` and `err_conn_reset`; `v2.3.1` gives
//! `v2`, `3`, `1` and `v2.3.1`. The whole makes an exact code outrank a memory that only shares
//! its pieces (`sku-4471` against one holding `sku` and `4471` apart); the parts let a query
//! name a piece (`reset`, `4471`).
//!
//! Stop words are dropped; parts made only of letters may be stemmed by a plural rule (see
//! [`stem`]); anything holding a digit or a connector is never stemmed, as a code is exact.

use std::borrow::Cow;

/// Characters that join alphanumeric runs into one word.
fn is_connector(c: char) -> bool {
    matches!(c, '-' | '_' | '.' | '/' | ':' | '#' | '@' | '+')
}

/// English function words, which match nearly every memory and so only add noise (BM25's idf
/// makes them nearly worthless anyway, but they would still cost a posting walk per query).
/// Short on purpose: "not", "no", "never" stay, they carry meaning in a preference.
const STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "been", "but", "by", "did", "do", "does", "for",
    "from", "had", "has", "have", "he", "her", "his", "i", "in", "is", "it", "its", "me", "my",
    "of", "on", "or", "our", "s", "she", "so", "that", "the", "their", "them", "then", "there",
    "they", "this", "to", "was", "we", "were", "what", "when", "which", "who", "will", "with",
    "you", "your",
];

fn is_stop_word(t: &str) -> bool {
    // Sorted, so a binary search; checked by a test.
    STOP_WORDS.binary_search(&t).is_ok()
}

/// A light plural stemmer (Harman's "S" stemmer): `policies` -> `policy`, `boxes` -> `boxe`,
/// `keys` -> `key`, leaving `us`/`ss` endings (`status`, `address`) alone. Conservative: it
/// never merges words of different meaning that a query would want apart, and the eval
/// (`search_eval`) measures it against no stemming.
pub fn stem(t: &str) -> Cow<'_, str> {
    let n = t.len();
    if n <= 3 || !t.bytes().all(|b| b.is_ascii_lowercase()) {
        return Cow::Borrowed(t);
    }
    if t.ends_with("ies") && !t.ends_with("eies") && !t.ends_with("aies") {
        return Cow::Owned(format!("{}y", &t[..n - 3]));
    }
    if t.ends_with("es") && !(t.ends_with("aes") || t.ends_with("ees") || t.ends_with("oes")) {
        return Cow::Borrowed(&t[..n - 1]);
    }
    if t.ends_with('s') && !t.ends_with("us") && !t.ends_with("ss") {
        return Cow::Borrowed(&t[..n - 1]);
    }
    Cow::Borrowed(t)
}

/// Calls `emit` with each token of `text`, in order. `stemming` applies [`stem`] to the
/// letter-only parts.
pub fn tokens(text: &str, stemming: bool, mut emit: impl FnMut(&str)) {
    let lower = text.to_lowercase();
    let mut rest = lower.as_str();
    while !rest.is_empty() {
        // The next word starts at the next alphanumeric character.
        let Some(start) = rest.find(char::is_alphanumeric) else {
            break;
        };
        rest = &rest[start..];
        // It runs while alphanumerics or connectors follow; then trailing connectors go.
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || is_connector(c)))
            .unwrap_or(rest.len());
        let word = rest[..end].trim_end_matches(is_connector);
        rest = &rest[end..];
        word_tokens(word, stemming, &mut emit);
    }
}

fn word_tokens(word: &str, stemming: bool, emit: &mut impl FnMut(&str)) {
    let mut parts = 0;
    for part in word.split(is_connector).filter(|p| !p.is_empty()) {
        parts += 1;
        if is_stop_word(part) {
            continue;
        }
        if stemming {
            emit(&stem(part));
        } else {
            emit(part);
        }
    }
    // The whole word is kept when it is an identifier: several parts, and a digit, an
    // underscore, a hyphen or an `@` in it. Dotted letters alone ("e.g", "i.e") are not.
    if parts > 1
        && word
            .chars()
            .any(|c| c.is_ascii_digit() || matches!(c, '_' | '-' | '@' | '#' | '/' | ':'))
    {
        emit(word);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(text: &str, stemming: bool) -> Vec<String> {
        let mut out = Vec::new();
        tokens(text, stemming, |t| out.push(t.to_string()));
        out
    }

    #[test]
    fn the_stop_words_are_sorted() {
        assert!(STOP_WORDS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn identifiers_are_kept_whole_and_split() {
        assert_eq!(
            all("Saw ERR_CONN_RESET on v2.3.1.", false),
            [
                "saw",
                "err",
                "conn",
                "reset",
                "err_conn_reset",
                "v2",
                "3",
                "1",
                "v2.3.1"
            ]
        );
        assert_eq!(
            all("order sku-4471, E1234!", false),
            ["order", "sku", "4471", "sku-4471", "e1234"]
        );
        assert_eq!(
            all("id 0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", false),
            [
                "id",
                "0190a1b2",
                "c3d4",
                "7e5f",
                "8a9b",
                "0c1d2e3f4a5b",
                "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
            ]
        );
        // Dotted letters are not an identifier; stop words go.
        assert_eq!(all("e.g. the cat", false), ["e", "g", "cat"]);
    }

    #[test]
    fn unicode_is_lowercased_and_letters_only_parts_are_stemmed() {
        assert_eq!(all("Größe ÉCOLE", false), ["größe", "école"]);
        assert_eq!(
            all(
                "The user's policies, boxes, keys and status; ERRORS-2 stay",
                true
            ),
            ["user", "policy", "boxe", "key", "status", "error", "2", "errors-2", "stay"]
        );
    }
}
