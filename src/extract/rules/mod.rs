//! The embedded, model-free extractor: sentences split into clauses, each clause matched
//! against cue phrases in English, Spanish, Portuguese, French and German
//! ([`super::cues`]), and what is kept restated in English, in the third person ("The user
//! lives in Lisbon"). Deliberately conservative (a clause needs an explicit first-person cue,
//! and negations, conditions, questions and other people's facts are dropped) and fully
//! deterministic. docs/EXTRACTION.md lists what it catches and misses, and its measured
//! precision and recall; keep that file in step with the cue tables.

use std::collections::HashMap;

use auditmem_projections::MemoryType;

use super::cues::{self, Cue, Kind, Lang, Out};
use super::person::{finish, third_person, Named};
use super::{
    cap_content, normalize_importance, Candidate, ExtractError, ExtractInput, Extractor, Sourced,
};

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
        Ok(Self::sourced(input)
            .into_iter()
            .map(|s| s.candidate)
            .collect())
    }

    fn extract_sourced(
        &self,
        input: &ExtractInput,
        _gone: &dyn Fn() -> bool,
    ) -> Result<Vec<Sourced>, ExtractError> {
        Ok(Self::sourced(input))
    }
}

impl RuleExtractor {
    /// The candidates of `input`, each with the user messages that said it.
    fn sourced(input: &ExtractInput) -> Vec<Sourced> {
        let mut out: Vec<Sourced> = Vec::new();
        // Each statement kept (lowercased), and where it is in `out`.
        let mut seen = HashMap::new();
        let mut take = |text: &str, message: Option<usize>| {
            for found in Self::found(text) {
                let key = found.candidate.content.to_lowercase();
                match seen.get(&key) {
                    // The same statement repeated in a conversation is one memory, drawn from
                    // every message that says it.
                    Some(&at) => {
                        let kept: &mut Sourced = &mut out[at];
                        kept.messages.extend(message);
                        kept.messages.dedup();
                    }
                    None => {
                        seen.insert(key, out.len());
                        out.push(Sourced {
                            candidate: found.candidate,
                            messages: message.into_iter().collect(),
                        });
                    }
                }
            }
        };
        match input {
            ExtractInput::Text(text) => take(text, None),
            ExtractInput::Messages(messages) => {
                for (i, m) in messages.iter().enumerate() {
                    if speaks_for_the_user(&m.role) {
                        take(&m.content, Some(i));
                    }
                }
            }
        }
        out
    }
}

/// The texts of an input that speak for the user: the text, or the user's turns. The
/// assistant's, the system's and tools' words are context; as facts about the user they
/// would be hearsay. (The extractor itself walks the messages with their indexes.)
#[cfg(test)]
pub(crate) fn user_texts(input: &ExtractInput) -> Box<dyn Iterator<Item = &str> + '_> {
    match input {
        ExtractInput::Text(text) => Box::new(std::iter::once(text.as_str())),
        ExtractInput::Messages(messages) => Box::new(
            messages
                .iter()
                .filter(|m| speaks_for_the_user(&m.role))
                .map(|m| m.content.as_str()),
        ),
    }
}

/// Whether a message of `role` speaks for the user (see [`user_texts`]).
fn speaks_for_the_user(role: &str) -> bool {
    role.eq_ignore_ascii_case("user")
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
        for f in cues::LEAD_FILLERS.iter().chain(cues::PLEASE.iter()) {
            if starts_with_phrase(rest, f) {
                lead.greeted |= cues::GREETINGS.contains(f);
                lead.polite |= cues::PLEASE.contains(f);
                lead.at = skip(lead.at + f.len());
                continue 'outer;
            }
        }
        for f in cues::COMMA_FILLERS.iter() {
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
            .chain(cues::INSTRUCTION_ANYWHERE.iter())
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
                if has_word(before, &cues::NEGATIONS)
                    || has_word(before, &cues::HYPOTHETICAL)
                    || has_word(before, &cues::THIRD_PARTY)
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
    for p in cues::PLEASE.iter() {
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
    let first_person = has_word(body, &cues::FIRST_PERSON);
    if polite {
        let first = words(body).next().unwrap_or_default();
        let one_off = cues::ONE_OFF_VERBS
            .iter()
            .any(|v| starts_with_phrase(body, v));
        return !one_off && !first_person && !first.is_empty();
    }
    !first_person && cues::INSTRUCTION_ANYWHERE.iter().any(|p| has(body, p))
}

/// An instruction to the assistant starting at `from`: "The user wants the assistant to
/// ...", an English reading when it is in English, else the user's words quoted.
fn instruction(n: &Norm<'_>, from: usize) -> Found {
    let body = &n.text[from..];
    let orig = n.orig_from(from).trim();
    let english = words(body)
        .next()
        .is_some_and(|w| cues::EN_IMPERATIVE.contains(&w))
        && !has_word(body, &cues::NOT_ENGLISH);
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
    if has_word(body, &cues::NEGATIONS) {
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
    if cues::ALWAYS_JOINED.contains(&word.as_str()) {
        return true;
    }
    if cues::MAYBE_FINAL.contains(&word.as_str()) {
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
mod tests;
