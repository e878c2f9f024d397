//! The one tokenizer of documents and queries: a query matches only what the same function,
//! with the same [`Analyzer`], made of a memory's text.
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
//! Stop words are dropped ([`StopWords`]); parts made only of letters may be stemmed
//! ([`Stemmer`]); anything holding a digit or a connector is never stemmed, as a code is exact.
//! The service's analyzer is [`Analyzer::default`]: Snowball's English stemmer and the short
//! stop list, what the LoCoMo eval measured best (docs/SEARCH.md).

use std::borrow::Cow;

/// Characters that join alphanumeric runs into one word.
fn is_connector(c: char) -> bool {
    matches!(c, '-' | '_' | '.' | '/' | ':' | '#' | '@' | '+')
}

/// English function words, which match nearly every memory and so only add noise (BM25's idf
/// makes them nearly worthless anyway, but they would still cost a posting walk per query).
/// Short on purpose: "not", "no", "never" stay, they carry meaning in a preference.
const SHORT_STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "been", "but", "by", "did", "do", "does", "for",
    "from", "had", "has", "have", "he", "her", "his", "i", "in", "is", "it", "its", "me", "my",
    "of", "on", "or", "our", "s", "she", "so", "that", "the", "their", "them", "then", "there",
    "they", "this", "to", "was", "we", "were", "what", "when", "which", "who", "will", "with",
    "you", "your",
];

/// NLTK's English stop list (the Snowball project's, with contractions' pieces: the tokenizer
/// cuts "didn't" into "didn" and "t"), less the negations "no", "nor" and "not", which carry
/// meaning in a preference. Conversation is mostly these words ("what did you do when..."):
/// left in, they give every turn a BM25 score and the fusion a long tail of noise.
const ENGLISH_STOP_WORDS: &[&str] = &[
    "a",
    "about",
    "above",
    "after",
    "again",
    "against",
    "ain",
    "all",
    "am",
    "an",
    "and",
    "any",
    "are",
    "aren",
    "as",
    "at",
    "be",
    "because",
    "been",
    "before",
    "being",
    "below",
    "between",
    "both",
    "but",
    "by",
    "can",
    "couldn",
    "d",
    "did",
    "didn",
    "do",
    "does",
    "doesn",
    "doing",
    "don",
    "down",
    "during",
    "each",
    "few",
    "for",
    "from",
    "further",
    "had",
    "hadn",
    "has",
    "hasn",
    "have",
    "haven",
    "having",
    "he",
    "her",
    "here",
    "hers",
    "herself",
    "him",
    "himself",
    "his",
    "how",
    "i",
    "if",
    "in",
    "into",
    "is",
    "isn",
    "it",
    "its",
    "itself",
    "just",
    "ll",
    "m",
    "ma",
    "me",
    "mightn",
    "more",
    "most",
    "mustn",
    "my",
    "myself",
    "needn",
    "now",
    "o",
    "of",
    "off",
    "on",
    "once",
    "only",
    "or",
    "other",
    "our",
    "ours",
    "ourselves",
    "out",
    "over",
    "own",
    "re",
    "s",
    "same",
    "shan",
    "she",
    "should",
    "shouldn",
    "so",
    "some",
    "such",
    "t",
    "than",
    "that",
    "the",
    "their",
    "theirs",
    "them",
    "themselves",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "through",
    "to",
    "too",
    "under",
    "until",
    "up",
    "ve",
    "very",
    "was",
    "wasn",
    "we",
    "were",
    "weren",
    "what",
    "when",
    "where",
    "which",
    "while",
    "who",
    "whom",
    "why",
    "will",
    "with",
    "won",
    "wouldn",
    "y",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselves",
];

/// Which words the tokenizer drops.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StopWords {
    /// 55 articles, pronouns and auxiliaries.
    #[default]
    Short,
    /// NLTK's English list less the negations (150 words): measured on LoCoMo, it finds no
    /// more than the short list (docs/SEARCH.md), so the service keeps the short one; the
    /// ablation still measures it.
    English,
}

impl StopWords {
    fn contains(self, t: &str) -> bool {
        // Sorted, so a binary search; checked by a test.
        let list = match self {
            StopWords::Short => SHORT_STOP_WORDS,
            StopWords::English => ENGLISH_STOP_WORDS,
        };
        list.binary_search(&t).is_ok()
    }
}

/// How the tokenizer reduces the letter-only parts of words.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Stemmer {
    /// Words as written (lowercased).
    None,
    /// Plurals only ([`stem`]).
    Plural,
    /// Snowball's English stemmer (Porter 2, the `rust-stemmers` crate): `went`, `going` and
    /// `goes` stay apart but `painting`, `paints` and `painted` meet, as do `adopted` and
    /// `adoption`'s `adopt`.
    #[default]
    Snowball,
}

/// The tokenizer's settings: documents and queries must share one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Analyzer {
    pub stemmer: Stemmer,
    pub stop_words: StopWords,
}

impl Analyzer {
    /// The analyzer the plural-stemmer index had: [`Stemmer::Plural`] (or none) and the short
    /// stop list; what [`tokens`] uses.
    pub fn plural(stemming: bool) -> Self {
        Analyzer {
            stemmer: if stemming {
                Stemmer::Plural
            } else {
                Stemmer::None
            },
            stop_words: StopWords::Short,
        }
    }
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

/// Calls `emit` with each token of `text`, in order, under [`Analyzer::plural`]`(stemming)`:
/// `stemming` applies [`stem`] to the letter-only parts.
pub fn tokens(text: &str, stemming: bool, emit: impl FnMut(&str)) {
    analyze(text, &Analyzer::plural(stemming), emit)
}

/// Calls `emit` with each token of `text` under `analyzer`, in order.
pub fn analyze(text: &str, analyzer: &Analyzer, mut emit: impl FnMut(&str)) {
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
        word_tokens(word, analyzer, &mut emit);
    }
}

fn word_tokens(word: &str, analyzer: &Analyzer, emit: &mut impl FnMut(&str)) {
    let mut parts = 0;
    for part in word.split(is_connector).filter(|p| !p.is_empty()) {
        parts += 1;
        if analyzer.stop_words.contains(part) {
            continue;
        }
        match analyzer.stemmer {
            Stemmer::None => emit(part),
            Stemmer::Plural => emit(&stem(part)),
            Stemmer::Snowball if part.chars().all(char::is_alphabetic) => {
                emit(&rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English).stem(part))
            }
            Stemmer::Snowball => emit(part),
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
        assert!(SHORT_STOP_WORDS.windows(2).all(|w| w[0] < w[1]));
        assert!(ENGLISH_STOP_WORDS.windows(2).all(|w| w[0] < w[1]));
        for negation in ["no", "nor", "not", "never"] {
            assert!(!StopWords::English.contains(negation), "{negation}");
        }
    }

    #[test]
    fn the_service_analyzer_stems_conversation_and_keeps_codes_exact() {
        let mut out = Vec::new();
        analyze(
            "Caroline didn't go painting; she paints, painted and adopted ERRORS-2 in 2023!",
            &Analyzer::default(),
            |t| out.push(t.to_string()),
        );
        assert_eq!(
            out,
            [
                "carolin", "didn", "t", "go", "paint", "paint", "paint", "adopt", "error", "2",
                "errors-2", "2023"
            ]
        );
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
