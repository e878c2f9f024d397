//! The embedded, model-free extractor: sentences split into clauses, each clause matched
//! against cue phrases in English, Spanish, Portuguese, French and German
//! ([`super::cues`]), and what is kept restated in English, in the third person ("The user
//! lives in Lisbon"). Deliberately conservative (a clause needs an explicit first-person cue,
//! and negations, conditions, questions and other people's facts are dropped) and fully
//! deterministic. docs/EXTRACTION.md lists what it catches and misses, and its measured
//! precision and recall; keep that file in step with the cue tables.

use std::collections::HashSet;

use auditmem_projections::MemoryType;

use super::cues::{self, Cue, Kind, Lang, Out};
use super::person::{finish, third_person, Named};
use super::{cap_content, normalize_importance, Candidate, ExtractError, ExtractInput, Extractor};

#[derive(Debug, Clone, Copy, Default)]
pub struct RuleExtractor;

/// A statement the rule extractor keeps: what it is about, and the candidate stored.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Found {
    pub kind: Kind,
    pub candidate: Candidate,
}

impl RuleExtractor {
    pub fn new() -> Self {
        Self
    }

    /// Every statement kept from one text, in order, repeats included.
    pub(crate) fn found(text: &str) -> Vec<Found> {
        let mut out = Vec::new();
        // A greeting on its own ("Hi!") still introduces what follows ("I'm Dana").
        let mut greeted = false;
        for statement in split_statements(text) {
            // A question is one as a whole: "Is it true that I'm allergic to nuts and I live
            // in Rome?" states neither.
            let asks = statement.trim_end().ends_with('?') || statement.contains('¿');
            for clause in clauses(statement) {
                let read = read_clause(clause, greeted, asks);
                greeted = read.greeting_only;
                out.extend(read.found);
            }
        }
        out
    }
}

impl Extractor for RuleExtractor {
    fn name(&self) -> &str {
        "rules"
    }

    fn extract(&self, input: &ExtractInput) -> Result<Vec<Candidate>, ExtractError> {
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        let mut take = |text: &str| {
            for found in Self::found(text) {
                // The same statement repeated in a conversation is one memory.
                if seen.insert(found.candidate.content.to_lowercase()) {
                    out.push(found.candidate);
                }
            }
        };
        for text in user_texts(input) {
            take(text);
        }
        Ok(out)
    }
}

/// The texts of an input that speak for the user: the text, or the user's turns. The
/// assistant's, the system's and tools' words are context; as facts about the user they
/// would be hearsay.
pub(crate) fn user_texts(input: &ExtractInput) -> Box<dyn Iterator<Item = &str> + '_> {
    match input {
        ExtractInput::Text(text) => Box::new(std::iter::once(text.as_str())),
        ExtractInput::Messages(messages) => Box::new(
            messages
                .iter()
                .filter(|m| m.role.eq_ignore_ascii_case("user"))
                .map(|m| m.content.as_str()),
        ),
    }
}

/// A clause lowercased with typographic apostrophes folded, and where each of its bytes
/// came from in the original, so that a value is cut from what the user wrote.
struct Norm<'a> {
    orig: &'a str,
    text: String,
    map: Vec<usize>,
}

impl<'a> Norm<'a> {
    fn new(orig: &'a str) -> Self {
        let mut text = String::with_capacity(orig.len());
        let mut map = Vec::with_capacity(orig.len() + 1);
        for (i, c) in orig.char_indices() {
            let c = if matches!(c, '\u{2019}' | '\u{2018}') {
                '\''
            } else {
                c
            };
            for lc in c.to_lowercase() {
                let start = text.len();
                text.push(lc);
                map.extend(std::iter::repeat_n(i, text.len() - start));
            }
        }
        map.push(orig.len());
        Norm { orig, text, map }
    }

    /// The original text from the normalized offset `from` on.
    fn orig_from(&self, from: usize) -> &'a str {
        &self.orig[self.map[from]..]
    }
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '\''
}

/// Words with their byte spans; a hyphen between letters stays inside a word
/// ("appelle-moi", "chame-me").
fn word_spans(t: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = None;
    let chars: Vec<(usize, char)> = t.char_indices().collect();
    for (k, &(i, c)) in chars.iter().enumerate() {
        let inner_hyphen = c == '-'
            && start.is_some()
            && chars.get(k + 1).is_some_and(|&(_, n)| n.is_alphanumeric());
        if is_word_char(c) || inner_hyphen {
            start.get_or_insert(i);
        } else if let Some(s) = start.take() {
            out.push((s, i));
        }
    }
    if let Some(s) = start {
        out.push((s, t.len()));
    }
    out
}

fn words(t: &str) -> impl Iterator<Item = &str> {
    word_spans(t).into_iter().map(move |(a, b)| &t[a..b])
}

/// Where `phrase` occurs in `t` as whole words.
fn phrase_positions<'a>(t: &'a str, phrase: &'a str) -> impl Iterator<Item = usize> + 'a {
    t.match_indices(phrase).filter_map(move |(i, _)| {
        let before_ok = t[..i]
            .chars()
            .next_back()
            .is_none_or(|c| !is_word_char(c) && c != '-');
        // A phrase ending in an apostrophe ("j'", "d'") runs into its word.
        let after_ok = phrase.ends_with('\'')
            || t[i + phrase.len()..]
                .chars()
                .next()
                .is_none_or(|c| !is_word_char(c) && c != '-');
        (before_ok && after_ok).then_some(i)
    })
}

fn has(t: &str, phrase: &str) -> bool {
    phrase_positions(t, phrase).next().is_some()
}

fn starts_with_phrase(t: &str, phrase: &str) -> bool {
    phrase_positions(t, phrase).next() == Some(0)
}

fn has_word(t: &str, list: &[&str]) -> bool {
    words(t).any(|w| list.contains(&w))
}

/// Splits a sentence into its clauses at "and", "but", "y", "et", "und"... or a comma when a
/// new subject or cue follows: "My name is Dana and I work at Acme" is two statements, "I
/// like tea, coffee and cake" one.
fn clauses(sentence: &str) -> Vec<&str> {
    let n = Norm::new(sentence);
    let spans = word_spans(&n.text);
    let mut out = Vec::new();
    let mut start = 0; // normalized offset of the clause being read
    for k in 1..spans.len() {
        let (ws, we) = spans[k];
        let word = &n.text[ws..we];
        if !cues::CLAUSE_OPENERS.contains(&word) {
            continue;
        }
        let (_, prev_end) = spans[k - 1];
        let prev = &n.text[spans[k - 1].0..prev_end];
        let gap = &n.text[prev_end..ws];
        let cut = if gap.contains([',', ':']) {
            Some(prev_end)
        } else if cues::CONJUNCTIONS.contains(&prev)
            && k >= 2
            && !people(&n.text[start..spans[k - 1].0])
        {
            let before = &n.text[spans[k - 2].1..spans[k - 1].0];
            Some(if before.contains(',') {
                spans[k - 2].1
            } else {
                spans[k - 1].0
            })
        } else {
            None
        };
        if let Some(end) = cut {
            if end > start {
                out.push(sentence[n.map[start]..n.map[end]].trim());
            }
            start = ws;
        }
    }
    out.push(sentence[n.map[start]..].trim());
    out.retain(|c| !c.is_empty());
    out
}

/// Whether `t` is only someone else, the subject shared with the user in "My sister and I
/// live in Rome": a clause that is not cut off, so the cue stays theirs.
fn people(t: &str) -> bool {
    let w: Vec<&str> = words(t).collect();
    w.len() <= 3 && w.iter().any(|x| cues::THIRD_PARTY.contains(x))
}

/// What the start of a clause says before its content: the offset where the content begins,
/// and whether a greeting or a "please" was passed.
struct Lead {
    at: usize,
    greeted: bool,
    polite: bool,
}

/// Skips greetings, thanks and fillers ("Hi! Please, also ...").
fn strip_lead(t: &str) -> Lead {
    let skip = |at: usize| -> usize {
        at + t[at..]
            .find(|c: char| is_word_char(c))
            .unwrap_or(t.len() - at)
    };
    let mut lead = Lead {
        at: skip(0),
        greeted: false,
        polite: false,
    };
    'outer: loop {
        let rest = &t[lead.at..];
        for f in cues::LEAD_FILLERS.iter().chain(cues::PLEASE) {
            if starts_with_phrase(rest, f) {
                lead.greeted |= cues::GREETINGS.contains(f);
                lead.polite |= cues::PLEASE.contains(f);
                lead.at = skip(lead.at + f.len());
                continue 'outer;
            }
        }
        for f in cues::COMMA_FILLERS {
            if starts_with_phrase(rest, f)
                && rest[f.len()..].trim_start().starts_with([',', '.', '!'])
            {
                lead.at = skip(lead.at + f.len());
                continue 'outer;
            }
        }
        return lead;
    }
}

/// What reading a clause gave: the statement it holds, and whether it was only a greeting.
struct Read {
    found: Option<Found>,
    greeting_only: bool,
}

/// Reads a clause; `greeted` when a greeting just came before it, `asks` when its sentence is
/// a question.
fn read_clause(clause: &str, greeted: bool, asks: bool) -> Read {
    let n = Norm::new(clause);
    let mut lead = strip_lead(&n.text);
    let greeting_only = lead.greeted && n.text[lead.at..].trim().is_empty();
    lead.greeted |= greeted;
    Read {
        found: statement_of(&n, &lead, asks),
        greeting_only,
    }
}

/// The statement a clause holds, if any.
fn statement_of(n: &Norm<'_>, lead: &Lead, asks: bool) -> Option<Found> {
    let body = &n.text[lead.at..];
    if words(body).count() < 2 {
        return None;
    }
    if asks {
        // A question asks; only a polite one carrying a standing instruction is kept
        // ("Could you always reply in French?").
        let polite = cues::POLITE_REQUEST
            .iter()
            .find(|p| starts_with_phrase(body, p))?;
        let request = lead.at + polite.len();
        let asked = n.text[request..].trim_start();
        let at = n.text.len() - asked.len();
        if !cues::INSTRUCTION_START
            .iter()
            .chain(cues::INSTRUCTION_ANYWHERE)
            .any(|p| has(asked, p))
        {
            return None;
        }
        return Some(instruction(n, at));
    }
    if let Some(found) = introduction(n, lead) {
        return Some(found);
    }
    if let Some((cue, at)) = find_cue(body) {
        return Some(statement(n, lead.at, cue, lead.at + at));
    }
    if is_instruction(body, lead.polite) {
        return Some(instruction(n, lead.at));
    }
    None
}

/// "Hi, I'm Dana": after a greeting, an introduction followed by a capitalised word.
fn introduction(n: &Norm<'_>, lead: &Lead) -> Option<Found> {
    if !lead.greeted {
        return None;
    }
    let body = &n.text[lead.at..];
    let intro = cues::INTRODUCTIONS
        .iter()
        .find(|p| starts_with_phrase(body, p))?;
    let after = lead.at + intro.len();
    let rest = n.orig_from(after).trim_start();
    // Capitalised words up to the first that is not, or that ends in punctuation.
    let mut name = Vec::new();
    for w in rest.split_whitespace() {
        let core = w.trim_end_matches(|c: char| !c.is_alphanumeric());
        if !core.chars().next().is_some_and(char::is_uppercase) {
            break;
        }
        name.push(core);
        if core.len() < w.len() {
            break;
        }
    }
    if name.is_empty() {
        return None;
    }
    Some(kept(
        Kind::Name,
        format!("The user's name is {}", name.join(" ")),
        body,
    ))
}

/// The first cue, in language then table order, that occurs in `body` with nothing before
/// it (in its clause) that negates it, makes it hypothetical or gives it to someone else.
fn find_cue(body: &str) -> Option<(&'static Cue, usize)> {
    for lang in Lang::ALL {
        for cue in lang.cues() {
            if cue.needs.is_some_and(|n| !body.contains(n)) {
                continue;
            }
            for at in phrase_positions(body, cue.phrase) {
                let before = &body[..at];
                let rest = &body[at + cue.phrase.len()..];
                if has_word(before, cues::NEGATIONS)
                    || has_word(before, cues::HYPOTHETICAL)
                    || has_word(before, cues::THIRD_PARTY)
                    || !fits(cue, rest)
                {
                    continue;
                }
                return Some((cue, at));
            }
        }
    }
    None
}

/// Whether what follows a cue makes it the statement it seems.
fn fits(cue: &Cue, rest: &str) -> bool {
    let first = words(rest).next();
    if words(rest).last() == Some("nicht") {
        return false;
    }
    if matches!(cue.out, Out::Value(_)) && first.is_none() {
        return false;
    }
    match cue.phrase {
        "i'm a" | "i am a" | "i'm an" | "i am an" => {
            first.is_some_and(|w| !cues::NOT_A_ROLE.contains(&w))
        }
        "i want" => first.is_some_and(|w| !cues::NOT_WANTED.contains(&w)),
        "i have a" | "i have an" | "i have two" | "i've got a" if cue.kind == Kind::Other => {
            first.is_some_and(|w| !cues::NOT_OWNED.contains(&w))
        }
        _ if cue.kind == Kind::Preference => {
            // "I like it", "Me gusta mucho", "I hate to bother you" say nothing lasting.
            !cues::IDIOMS_AFTER_LIKING
                .iter()
                .any(|i| rest.trim_start().starts_with(i))
                && words(rest).any(|w| !cues::EMPTY_OBJECT_WORDS.contains(&w))
        }
        _ => true,
    }
}

/// The statement for a clause whose content starts at `from` and whose cue is at `at`.
fn statement(n: &Norm<'_>, from: usize, cue: &Cue, at: usize) -> Found {
    let body = &n.text[from..];
    let content = match cue.out {
        Out::Rewrite => third_person(n.orig_from(at), Named::No),
        Out::Whole => third_person(n.orig_from(from), Named::No),
        Out::Value(template) => {
            let value = n
                .orig_from(at + cue.phrase.len())
                .trim_start_matches(|c: char| c.is_whitespace() || matches!(c, ',' | ':'));
            finish(&template.replace("{}", &finish_value(value)))
        }
        Out::Fixed(s) => s.to_string(),
        Out::Quote => quoted("The user said", n.orig_from(from)),
    };
    kept(cue.kind, content, body)
}

/// What follows `phrase` at the start of `orig`, matched as `phrase` is matched on the
/// normalized text (so "Don’t" is "don't"), cut from the original.
fn after_phrase<'a>(orig: &'a str, phrase: &str) -> Option<&'a str> {
    let n = Norm::new(orig);
    starts_with_phrase(&n.text, phrase).then(|| n.orig_from(phrase.len()))
}

/// A value as written, without its final punctuation or a closing "please" ("Llámame Pepe,
/// por favor": the "please" is not part of the name).
fn finish_value(v: &str) -> String {
    let v = v
        .trim()
        .trim_end_matches(['.', '!', ';', ',', '…', ':'])
        .trim_end();
    let n = Norm::new(v);
    for p in cues::PLEASE {
        if let Some(cut) = n.text.strip_suffix(p) {
            if cut.trim_end().ends_with(',') {
                let kept = &v[..n.map[cut.len()]];
                return kept.trim_end().trim_end_matches(',').trim_end().to_string();
            }
        }
    }
    v.to_string()
}

fn quoted(frame: &str, words: &str) -> String {
    let words = finish(words.trim());
    format!("{frame}: \"{words}\"")
}

/// Whether a clause with no cue of its own is a standing instruction: it starts with one
/// ("Always ...", "Don't ...", "Nunca ..."), is a "please" that asks for more than a one-off,
/// or holds "always"/"never" without a first-person subject ("Answer always in French").
fn is_instruction(body: &str, polite: bool) -> bool {
    if cues::INSTRUCTION_START
        .iter()
        .any(|p| starts_with_phrase(body, p))
    {
        return true;
    }
    let first_person = has_word(body, cues::FIRST_PERSON);
    if polite {
        let first = words(body).next().unwrap_or_default();
        let one_off = cues::ONE_OFF_VERBS
            .iter()
            .any(|v| starts_with_phrase(body, v));
        return !one_off && !first_person && !first.is_empty();
    }
    !first_person && cues::INSTRUCTION_ANYWHERE.iter().any(|p| has(body, p))
}

/// English openers that tell the assistant what to do.
const EN_IMPERATIVE: &[&str] = &[
    "always", "never", "don't", "do not", "dont", "make", "be", "remember", "avoid", "stop",
    "from", "going", "by", "you", "could", "can", "would", "will", "use", "answer", "reply",
    "respond", "write", "keep", "give", "call", "address", "refer", "show", "include", "format",
    "speak", "talk", "explain", "cite", "add", "send", "tell", "ask",
];

/// Articles and prepositions of the other languages: an imperative holding one is not
/// English ("Use o sistema métrico").
const NOT_ENGLISH: &[&str] = &[
    "el", "la", "los", "las", "en", "por", "con", "em", "o", "os", "um", "uma", "com", "de", "do",
    "da", "le", "les", "des", "du", "un", "une", "avec", "der", "die", "das", "ein", "eine", "und",
    "mit", "y", "et",
];

/// An instruction to the assistant starting at `from`: "The user wants the assistant to
/// ...", an English reading when it is in English, else the user's words quoted.
fn instruction(n: &Norm<'_>, from: usize) -> Found {
    let body = &n.text[from..];
    let orig = n.orig_from(from).trim();
    let english = words(body)
        .next()
        .is_some_and(|w| EN_IMPERATIVE.contains(&w))
        && !has_word(body, NOT_ENGLISH);
    let content = if english {
        english_instruction(orig)
    } else if let Some(language) = answer_language(body) {
        format!("The user wants answers in {language}")
    } else {
        quoted("The user asks the assistant", orig)
    };
    kept(Kind::Instruction, content, body)
}

/// "Please, always reply in Spanish" -> "The user wants the assistant to always reply in
/// Spanish"; "Don't use tabs" -> "... not to use tabs"; "From now on, ..." and "you must" are
/// implied by the frame.
fn english_instruction(orig: &str) -> String {
    let mut rest = orig.trim();
    for prefix in [
        "could you",
        "can you",
        "would you",
        "will you",
        "please",
        "from now on",
        "going forward",
        "by default",
        "you must",
        "you should",
        "please",
    ] {
        if let Some(after) = after_phrase(rest, prefix) {
            rest = after.trim_start_matches(|c: char| c == ',' || c.is_whitespace());
        }
    }
    let (frame, rest) = match ["don't", "do not", "dont"]
        .iter()
        .find_map(|p| after_phrase(rest, p))
    {
        Some(after) => ("The user wants the assistant not to", after.trim_start()),
        None => ("The user wants the assistant to", rest),
    };
    let said = third_person(rest, Named::Yes);
    let mut chars = said.chars();
    let said: String = match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => said,
    };
    // The assistant is already the subject: "its replies", not "the assistant's replies".
    let said = said.replace("the assistant's", "its");
    format!("{frame} {said}")
}

/// The language an instruction asks answers in, when it names one and negates nothing.
fn answer_language(body: &str) -> Option<&'static str> {
    if has_word(body, cues::NEGATIONS) {
        return None;
    }
    cues::LANGUAGES
        .iter()
        .find(|(word, _)| has(body, word))
        .map(|(_, english)| *english)
}

/// The candidate for a statement of `kind` whose normalized clause is `t`.
fn kept(kind: Kind, content: String, t: &str) -> Found {
    let memory_type = kind.memory_type();
    let safety = cues::SAFETY_STEMS.iter().any(|s| t.contains(s));
    let importance = match memory_type {
        MemoryType::Rule => {
            0.7 + if cues::INTENSIFIERS.iter().any(|p| has(t, p)) {
                0.2
            } else {
                0.0
            } + if safety { 0.2 } else { 0.0 }
        }
        MemoryType::Fact => {
            0.6 + if safety { 0.2 } else { 0.0 } + if kind == Kind::Name { 0.1 } else { 0.0 }
        }
        MemoryType::Context => {
            0.4 + if cues::URGENT.iter().any(|p| has(t, p)) {
                0.1
            } else {
                0.0
            }
        }
    };
    Found {
        kind,
        candidate: Candidate {
            content: cap_content(&content),
            memory_type,
            importance: normalize_importance(importance),
        },
    }
}

/// Abbreviations whose period never ends a sentence.
const ALWAYS_JOINED: &[&str] = &[
    "e.g.", "i.e.", "mr.", "mrs.", "ms.", "dr.", "prof.", "st.", "vs.", "cf.", "approx.", "fig.",
    "jr.", "sr.", "mt.", "dept.", "ca.",
];
/// Abbreviations that may end a sentence: split only if the next word is
/// capitalised ("... pears, etc. Please ..." vs "at 9 a.m. tomorrow").
const MAYBE_FINAL: &[&str] = &["etc.", "a.m.", "p.m.", "inc.", "ltd.", "co.", "corp."];

/// Splits into statements on newlines and on `. ! ? ; …` followed by
/// whitespace or the end, keeping decimals ("5.5"), versions, URLs and
/// common abbreviations ("e.g.", "Dr.") inside their statement. Leading list
/// markers ("- ", "* ", "• ") are dropped; nothing else is rewritten.
pub(crate) fn split_statements(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for line in text.lines() {
        let chars: Vec<(usize, char)> = line.char_indices().collect();
        let mut start = 0;
        let mut i = 0;
        while i < chars.len() {
            let (pos, c) = chars[i];
            if !matches!(c, '.' | '!' | '?' | ';' | '…') {
                i += 1;
                continue;
            }
            let mut j = i + 1;
            while j < chars.len() && matches!(chars[j].1, '.' | '!' | '?' | '…') {
                j += 1;
            }
            while j < chars.len() && matches!(chars[j].1, '"' | '\'' | ')' | ']' | '”' | '’' | '»')
            {
                j += 1;
            }
            let end = chars.get(j).map_or(line.len(), |&(p, _)| p);
            let boundary = j >= chars.len() || chars[j].1.is_whitespace();
            let single_period = c == '.' && j == i + 1;
            if boundary && !(single_period && keeps_period(line, start, pos, &line[end..])) {
                push_statement(&mut out, &line[start..end]);
                start = end;
            }
            i = j;
        }
        push_statement(&mut out, &line[start..]);
    }
    out
}

/// Whether the period at `pos` belongs to an abbreviation or initial.
fn keeps_period(line: &str, start: usize, pos: usize, after: &str) -> bool {
    let word_start = line[start..pos]
        .rfind(char::is_whitespace)
        .map_or(start, |k| start + k + 1);
    let word = line[word_start..=pos]
        .trim_start_matches(['(', '"', '\'', '“', '‘'])
        .to_lowercase();
    let next_upper = after
        .trim_start()
        .chars()
        .next()
        .is_some_and(char::is_uppercase);
    if ALWAYS_JOINED.contains(&word.as_str()) {
        return true;
    }
    if MAYBE_FINAL.contains(&word.as_str()) {
        return !next_upper;
    }
    let letters: Vec<char> = word.chars().filter(|c| *c != '.').collect();
    // A lone capital is an initial ("J. Smith"); dotted letter groups
    // ("U.S.") behave like "etc.".
    let original = &line[word_start..pos];
    if letters.len() == 1 && original.chars().all(char::is_uppercase) {
        return true;
    }
    let dotted = word.len() >= 4
        && word
            .split('.')
            .filter(|p| !p.is_empty())
            .all(|p| p.chars().count() == 1 && p.chars().all(char::is_alphabetic));
    dotted && !next_upper
}

fn push_statement<'a>(out: &mut Vec<&'a str>, s: &'a str) {
    let s = s.trim();
    let s = s
        .strip_prefix("- ")
        .or_else(|| s.strip_prefix("* "))
        .or_else(|| s.strip_prefix("• "))
        .unwrap_or(s)
        .trim();
    if !s.is_empty() {
        out.push(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extract::ChatMessage;

    fn extract_text(text: &str) -> Vec<Candidate> {
        RuleExtractor::new()
            .extract(&ExtractInput::Text(text.to_string()))
            .unwrap()
    }

    fn summary(text: &str) -> Vec<(String, MemoryType, f32)> {
        extract_text(text)
            .into_iter()
            .map(|c| (c.content, c.memory_type, c.importance))
            .collect()
    }

    fn one(text: &str) -> Option<(String, MemoryType, f32)> {
        let got = summary(text);
        assert!(got.len() <= 1, "{text:?} gave {got:?}");
        got.into_iter().next()
    }

    fn msg(role: &str, content: &str) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: content.into(),
        }
    }

    /// Given statements, when extracted, then each is one memory with this content, type
    /// and importance.
    fn each_is(cases: &[(&str, &str, f32)], memory_type: MemoryType) {
        for (said, stored, importance) in cases {
            assert_eq!(
                one(said),
                Some((stored.to_string(), memory_type, *importance)),
                "{said:?}"
            );
        }
    }

    #[test]
    fn instructions_and_preferences_become_rules_in_the_third_person() {
        each_is(
            &[
                (
                    "Always answer in British English.",
                    "The user wants the assistant to always answer in British English",
                    0.9,
                ),
                (
                    "Never use emojis in your replies",
                    "The user wants the assistant to never use emojis in its replies",
                    0.9,
                ),
                (
                    "Please use metric units.",
                    "The user wants the assistant to use metric units",
                    0.7,
                ),
                (
                    "Don't use tabs for indentation.",
                    "The user wants the assistant not to use tabs for indentation",
                    0.7,
                ),
                (
                    "Make sure every example compiles.",
                    "The user wants the assistant to make sure every example compiles",
                    0.7,
                ),
                ("Call me Bob.", "The user wants to be called Bob", 0.7),
                (
                    "I prefer short answers with code first.",
                    "The user prefers short answers with code first",
                    0.7,
                ),
                (
                    "I'd rather you didn't summarise my emails.",
                    "The user would rather the assistant didn't summarise their emails",
                    0.7,
                ),
                ("I like dark themes", "The user likes dark themes", 0.7),
                (
                    "I always want short answers.",
                    "The user always wants short answers",
                    0.9,
                ),
                (
                    "I want answers in Spanish",
                    "The user wants answers in Spanish",
                    0.7,
                ),
                ("I hate long meetings", "The user hates long meetings", 0.7),
                (
                    "Prefiero respuestas cortas.",
                    "The user prefers respuestas cortas",
                    0.7,
                ),
                (
                    "No me gustan las reuniones largas.",
                    "The user dislikes las reuniones largas",
                    0.7,
                ),
                (
                    "Responde siempre en español.",
                    "The user wants answers in Spanish",
                    0.9,
                ),
                (
                    "Nunca uses emojis.",
                    "The user asks the assistant: \"Nunca uses emojis\"",
                    0.9,
                ),
                ("Je n'aime pas le café.", "The user dislikes le café", 0.7),
                (
                    "Ich mag keine langen Meetings.",
                    "The user dislikes langen Meetings",
                    0.7,
                ),
                (
                    "Llámame Pepe, por favor.",
                    "The user wants to be called Pepe",
                    0.7,
                ),
            ],
            MemoryType::Rule,
        );
    }

    #[test]
    fn stable_facts_become_third_person_facts() {
        each_is(
            &[
                ("My name is Ann Lee.", "The user's name is Ann Lee", 0.7),
                (
                    "I work at Acme Corp as a data engineer.",
                    "The user works at Acme Corp as a data engineer",
                    0.6,
                ),
                (
                    "I am allergic to peanuts.",
                    "The user is allergic to peanuts",
                    0.8,
                ),
                ("I live in Lisbon", "The user lives in Lisbon", 0.6),
                ("I'm a nurse", "The user is a nurse", 0.6),
                (
                    "I have a golden retriever named Rex.",
                    "The user has a golden retriever named Rex",
                    0.6,
                ),
                ("I was born in 1984.", "The user was born in 1984", 0.6),
                (
                    "Please remember that my name is Ann",
                    "The user's name is Ann",
                    0.7,
                ),
                (
                    "Hi! I'm Marcus, nice to meet you.",
                    "The user's name is Marcus",
                    0.7,
                ),
                ("Me llamo Lucía.", "The user's name is Lucía", 0.7),
                ("Vivo en Sevilla.", "The user lives in Sevilla", 0.6),
                ("Soy vegana.", "The user is vegan", 0.6),
                ("Moro no Porto.", "The user lives in Porto", 0.6),
                (
                    "Tenho alergia à penicilina.",
                    "The user is allergic to penicilina",
                    0.8,
                ),
                ("J’habite à Lyon.", "The user lives in Lyon", 0.6),
                (
                    "Je travaille chez Renault.",
                    "The user works at Renault",
                    0.6,
                ),
                ("Ich heiße Jonas.", "The user's name is Jonas", 0.7),
                (
                    "Ich esse kein Schweinefleisch.",
                    "The user does not eat Schweinefleisch",
                    0.6,
                ),
            ],
            MemoryType::Fact,
        );
    }

    #[test]
    fn the_current_project_and_situation_become_context() {
        each_is(
            &[
                (
                    "I'm preparing a talk on Rust for Friday.",
                    "The user is preparing a talk on Rust for Friday",
                    0.4,
                ),
                (
                    "We are migrating from MySQL to Postgres.",
                    "The user and their team are migrating from MySQL to Postgres",
                    0.4,
                ),
                (
                    "This week I'm on call.",
                    "This week the user is on call",
                    0.4,
                ),
                (
                    "The deadline for the report is Monday.",
                    "The deadline for the report is Monday",
                    0.5,
                ),
                (
                    "Estoy trabajando en una aplicación de reservas.",
                    "The user is working on una aplicación de reservas",
                    0.4,
                ),
                (
                    "Diese Woche habe ich Urlaub.",
                    "The user said: \"Diese Woche habe ich Urlaub\"",
                    0.4,
                ),
            ],
            MemoryType::Context,
        );
    }

    #[test]
    fn a_compound_turn_is_split_into_its_statements() {
        assert_eq!(
            summary("My name is Dana and I work at Initech. I live in Oslo, I'm vegan and I prefer concise answers."),
            vec![
                ("The user's name is Dana".to_string(), MemoryType::Fact, 0.7),
                ("The user works at Initech".to_string(), MemoryType::Fact, 0.6),
                ("The user lives in Oslo".to_string(), MemoryType::Fact, 0.6),
                ("The user is vegan".to_string(), MemoryType::Fact, 0.6),
                ("The user prefers concise answers".to_string(), MemoryType::Rule, 0.7),
            ]
        );
        assert_eq!(
            summary(
                "Vivo en Bilbao y trabajo en Iberdrola. Je m'appelle Léa et j'habite à Nantes."
            ),
            vec![
                (
                    "The user lives in Bilbao".to_string(),
                    MemoryType::Fact,
                    0.6
                ),
                (
                    "The user works at Iberdrola".to_string(),
                    MemoryType::Fact,
                    0.6
                ),
                ("The user's name is Léa".to_string(), MemoryType::Fact, 0.7),
                (
                    "The user lives in Nantes".to_string(),
                    MemoryType::Fact,
                    0.6
                ),
            ]
        );
        // A list inside one statement is not split.
        assert_eq!(
            one("I like tea, coffee and cake"),
            Some((
                "The user likes tea, coffee and cake".into(),
                MemoryType::Rule,
                0.7
            ))
        );
    }

    #[test]
    fn questions_conditions_negations_and_other_people_are_not_the_users_facts() {
        for text in [
            "Hi!",
            "Thanks!",
            "Thank you so much, I like it.",
            "Okay, sounds good.",
            "What time is it?",
            "¿Dónde vives tú?",
            "Do you think I should move to Berlin?",
            "If I lived in Paris I would cycle everywhere.",
            "Si viviera en París, iría al Louvre.",
            "Wenn ich in Paris wohnen würde, würde ich Französisch lernen.",
            "I don't live in London anymore.",
            "I'm not allergic to anything.",
            "No soy vegano.",
            "Je ne suis pas végétarien.",
            "Ich mag Kaffee nicht.",
            "My sister lives in Rome.",
            "My sister and I live in Rome.",
            "Mi hermano es alérgico a los gatos.",
            "Minha irmã mora em Roma.",
            "Mon frère travaille chez Airbus.",
            "Meine Tochter ist allergisch gegen Nüsse.",
            "Please summarize this article.",
            "Por favor, traduce este texto al inglés.",
            "I'm a bit tired",
            "I hate to bother you",
            "I have a question",
            "Me gusta mucho.",
            "I always forget my keys",
            "Is it true that I'm allergic to nuts and I live in Rome?",
            "I want to know the time in Tokyo.",
            "I want a summary of this thread.",
        ] {
            assert_eq!(extract_text(text), vec![], "{text:?}");
        }
    }

    #[test]
    fn polite_question_with_standing_instruction_is_a_rule() {
        assert_eq!(
            one("Could you always reply in French?"),
            Some((
                "The user wants the assistant to always reply in French".into(),
                MemoryType::Rule,
                0.9
            ))
        );
    }

    #[test]
    fn only_user_turns_are_read_from_messages() {
        // Given a conversation where every role mentions something memorable
        let input = ExtractInput::Messages(vec![
            msg("system", "Always be helpful."),
            msg("user", "Hi! My name is Ann."),
            msg("assistant", "Nice to meet you. I live in the cloud."),
            msg("tool", "I am allergic to nothing."),
            msg("function", "My name is Tool."),
            msg("User", "I prefer concise answers."),
        ]);
        // When extracting
        let got = RuleExtractor::new().extract(&input).unwrap();
        // Then only the user's statements are kept, in order
        let contents: Vec<&str> = got.iter().map(|c| c.content.as_str()).collect();
        assert_eq!(
            contents,
            vec!["The user's name is Ann", "The user prefers concise answers"]
        );
    }

    #[test]
    fn text_and_single_user_message_give_the_same_result() {
        let text = "I live in Oslo. Always use 24-hour time.";
        let from_text = extract_text(text);
        let from_messages = RuleExtractor::new()
            .extract(&ExtractInput::Messages(vec![msg("user", text)]))
            .unwrap();
        assert_eq!(from_text, from_messages);
        assert_eq!(from_text.len(), 2);
    }

    #[test]
    fn splitting_keeps_decimals_abbreviations_and_urls() {
        assert_eq!(
            split_statements("Version 5.5 works, e.g. on example.com. Next one? Yes; done…"),
            vec![
                "Version 5.5 works, e.g. on example.com.",
                "Next one?",
                "Yes;",
                "done…"
            ]
        );
        assert_eq!(
            split_statements("I like apples, pears, etc. Please note it.\n- Bullet one\n\n* two"),
            vec![
                "I like apples, pears, etc.",
                "Please note it.",
                "Bullet one",
                "two"
            ]
        );
        assert_eq!(
            split_statements("Ask J. Smith in the U.S. office. He said \"no.\" Fine"),
            vec![
                "Ask J. Smith in the U.S. office.",
                "He said \"no.\"",
                "Fine"
            ]
        );
        assert_eq!(
            summary("Please never schedule anything before 9 a.m. on weekdays."),
            vec![(
                "The user wants the assistant to never schedule anything before 9 a.m. on weekdays"
                    .to_string(),
                MemoryType::Rule,
                0.9
            )]
        );
    }

    #[test]
    fn repeated_statements_are_kept_once_and_output_is_deterministic() {
        let text = "I live in Rome. i live in rome. I live in Rome!";
        let a = extract_text(text);
        assert_eq!(a, extract_text(text));
        assert_eq!(a.len(), 1, "{a:?}");
    }

    #[test]
    fn typographic_apostrophes_and_case_changing_letters_are_read_safely() {
        assert_eq!(
            one("Don’t use tabs for indentation."),
            Some((
                "The user wants the assistant not to use tabs for indentation".into(),
                MemoryType::Rule,
                0.7
            ))
        );
        assert_eq!(
            one("I’m allergic to shellfish"),
            Some((
                "The user is allergic to shellfish".into(),
                MemoryType::Fact,
                0.8
            ))
        );
        // Letters whose lowercase is longer or shorter in bytes must not cut inside a char.
        for text in [
            "İstanbul: I live in İzmir.",
            "\u{212A}eep answers short, always.",
            "Please \u{212A}eep it short, POR FAVOR",
            "Llámame İpek, POR FAVOR",
            "DON’T USE TABS",
            "Could you ALWAYS reply in French?",
        ] {
            let _ = extract_text(text);
        }
        assert_eq!(
            one("Llámame İpek, POR FAVOR"),
            Some((
                "The user wants to be called İpek".into(),
                MemoryType::Rule,
                0.7
            ))
        );
    }

    #[test]
    fn long_statement_is_capped() {
        let text = format!("I prefer {}", "green tea ".repeat(2500));
        let got = extract_text(&text);
        assert_eq!(got.len(), 1);
        assert_eq!(
            got[0].content.chars().count(),
            crate::extract::MAX_CONTENT_CHARS
        );
    }

    #[test]
    fn documented_examples_hold() {
        // The examples table of docs/EXTRACTION.md, row by row.
        let f = MemoryType::Fact;
        let r = MemoryType::Rule;
        let c = MemoryType::Context;
        type Row<'a> = (&'a str, &'a [(&'a str, MemoryType, f32)]);
        let rows: &[Row] = &[
            (
                "My name is Dana and I work at Initech.",
                &[
                    ("The user's name is Dana", f, 0.7),
                    ("The user works at Initech", f, 0.6),
                ],
            ),
            (
                "Hi! I'm Marcus, nice to meet you.",
                &[("The user's name is Marcus", f, 0.7)],
            ),
            (
                "I am allergic to peanuts.",
                &[("The user is allergic to peanuts", f, 0.8)],
            ),
            (
                "I prefer my coffee black",
                &[("The user prefers their coffee black", r, 0.7)],
            ),
            (
                "Always answer in British English.",
                &[(
                    "The user wants the assistant to always answer in British English",
                    r,
                    0.9,
                )],
            ),
            (
                "Don't use tabs for indentation.",
                &[(
                    "The user wants the assistant not to use tabs for indentation",
                    r,
                    0.7,
                )],
            ),
            (
                "We are migrating from MySQL to Postgres.",
                &[(
                    "The user and their team are migrating from MySQL to Postgres",
                    c,
                    0.4,
                )],
            ),
            (
                "The deadline for the report is Monday.",
                &[("The deadline for the report is Monday", c, 0.5)],
            ),
            (
                "Me llamo Ana y vivo en Madrid.",
                &[
                    ("The user's name is Ana", f, 0.7),
                    ("The user lives in Madrid", f, 0.6),
                ],
            ),
            (
                "No me gustan las reuniones largas.",
                &[("The user dislikes las reuniones largas", r, 0.7)],
            ),
            (
                "Responde siempre en español.",
                &[("The user wants answers in Spanish", r, 0.9)],
            ),
            (
                "Tenho alergia à penicilina.",
                &[("The user is allergic to penicilina", f, 0.8)],
            ),
            (
                "Je suis végétarien, mais j'adore le fromage.",
                &[
                    ("The user is vegetarian", f, 0.6),
                    ("The user loves le fromage", r, 0.7),
                ],
            ),
            (
                "Ich heiße Tim und wohne in Leipzig.",
                &[
                    ("The user's name is Tim", f, 0.7),
                    ("The user lives in Leipzig", f, 0.6),
                ],
            ),
            (
                "Diese Woche habe ich Urlaub.",
                &[("The user said: \"Diese Woche habe ich Urlaub\"", c, 0.4)],
            ),
        ];
        for (said, stored) in rows {
            let want: Vec<(String, MemoryType, f32)> = stored
                .iter()
                .map(|(s, t, i)| (s.to_string(), *t, *i))
                .collect();
            assert_eq!(summary(said), want, "{said:?}");
        }
        for nothing in [
            "Hi!",
            "Thanks, I like it.",
            "What time is it?",
            "¿Dónde vives tú?",
            "If I lived in Paris I would cycle everywhere.",
            "I'm not allergic to anything.",
            "No soy vegano.",
            "Ich mag Kaffee nicht.",
            "My sister lives in Rome.",
            "Mon frère travaille chez Airbus.",
            "Please summarize this article.",
            "I always forget my keys",
        ] {
            assert_eq!(extract_text(nothing), vec![], "{nothing:?}");
        }
    }

    #[test]
    fn documented_limits_hold() {
        // Given the known misses and misfires listed in docs/EXTRACTION.md
        for missed in [
            "Berlin is where I live",
            "En Madrid es donde vivo.",
            "Paris, c'est là que je vis.",
            "In München lebe ich seit drei Jahren.",
            "Ich wohne seit 2015 in Köln.",
            "We live in a small town near Porto.",
            "My wife and I are vegetarian.",
            "Mi pareja y yo vivimos en Quito.",
            "I've been vegan for years",
            "I'm Brazilian.",
            "Sou engenheiro de software.",
            "Je suis médecin généraliste.",
            "Ich bin Softwareentwickler.",
            "Use metric units.",
            "Let's use TypeScript for all examples.",
            "Me responda sempre em tópicos.",
            "Tutoie-moi, s'il te plaît.",
            "Duze mich bitte.",
            "My brother is allergic to cats",
        ] {
            assert_eq!(extract_text(missed), vec![], "{missed:?}");
        }
        assert_eq!(
            one("Me encanta esta idea."),
            Some(("The user loves esta idea".into(), MemoryType::Rule, 0.7))
        );
        assert_eq!(
            one("I live in Lisbon with two cats."),
            Some((
                "The user lives in Lisbon with two cats".into(),
                MemoryType::Fact,
                0.6
            ))
        );
        assert_eq!(
            summary("I have a dog. His name is Rex."),
            vec![("The user has a dog".to_string(), MemoryType::Fact, 0.6)]
        );
        assert_eq!(
            one("I prefer that one"),
            Some(("The user prefers that one".into(), MemoryType::Rule, 0.7))
        );
        assert_eq!(
            split_statements("I'm in group B. Next week I'm off."),
            vec!["I'm in group B. Next week I'm off."]
        );
        assert_eq!(
            one("I love that idea!"),
            Some(("The user loves that idea".into(), MemoryType::Rule, 0.7))
        );
        assert_eq!(
            one("Siempre llego tarde."),
            Some((
                "The user asks the assistant: \"Siempre llego tarde\"".into(),
                MemoryType::Rule,
                0.9
            ))
        );
        assert_eq!(
            one("The weather is nice today"),
            Some(("The weather is nice today".into(), MemoryType::Context, 0.4))
        );
        assert_eq!(
            one("Ich arbeite für eine Versicherung."),
            Some((
                "The user works for eine Versicherung".into(),
                MemoryType::Fact,
                0.6
            ))
        );
    }
}
