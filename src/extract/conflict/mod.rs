//! Contradictions and duplicates between memories, decided by rules: whether a new memory
//! states a different value for the same single-valued subject as an existing one (it
//! supersedes it), the same thing in other words (it is a duplicate), or neither.
//!
//! A memory is read as the rule extractor reads a turn ([`RuleExtractor::found`], five
//! languages, first person) or, when it already is one of the extractor's third-person
//! statements ("The user lives in Lisbon"), as that statement; either way it becomes a set of
//! [`Fact`]s: a slot (name, home, employer, role, allergy, diet, a preference between
//! alternatives, answer language, current project), a normalised value and whether it is
//! negated ("no longer allergic to peanuts"). Precision comes first (the issue asks ≥ 0.9):
//! anything not read into a fact, a vague value ("a startup"), values of different
//! granularity (a country and a city) or a value that extends the other ("Porto" and "Porto
//! Alegre") make the pair `Unrelated`. docs/EXTRACTION.md ("Contradictions and duplicates")
//! documents the rules and the measured precision and recall.
//!
//! The rules' phrase tables are data (`lexicon/conflict.txt`, loaded by `tables`).
//! [`ChatConflictJudge`] (`judge`) lets an OpenAI-compatible chat model decide instead, with
//! the extraction provider's timeout, retry and error type.

mod judge;
mod tables;

use std::collections::BTreeSet;

use uuid::Uuid;

use super::cues::{self, Kind};
use super::rules::RuleExtractor;
use super::ExtractError;
pub use judge::{ChatConflictJudge, CONFLICT_PROMPT};
use tables::{
    ALLERGENS, ANSWER_PHRASES, ANSWER_WORDS, COMPANY_SUFFIXES, COUNTRIES, DIETS, DROPPED_NEGATIONS,
    EXONYMS, GROUPS, LEADING, PATTERNS, REGIONS, VAGUE, VALUE_ENDS,
};

/// What a contradiction is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ConflictKind {
    /// The user's name, or what they want to be called.
    Name,
    /// Where the user lives.
    Home,
    /// Where the user works (employer) or as what (role).
    Work,
    Allergy,
    Diet,
    /// "prefers X" vs "prefers Y" between alternatives (tea or coffee, tabs or spaces...).
    Preference,
    /// The language answers should be in.
    AnswerLanguage,
    /// The user's current project.
    Project,
}

impl ConflictKind {
    pub fn label(self) -> &'static str {
        match self {
            ConflictKind::Name => "name",
            ConflictKind::Home => "home",
            ConflictKind::Work => "work",
            ConflictKind::Allergy => "allergy",
            ConflictKind::Diet => "diet",
            ConflictKind::Preference => "preference",
            ConflictKind::AnswerLanguage => "answer_language",
            ConflictKind::Project => "project",
        }
    }
}

/// How a new memory relates to an existing one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Relation {
    /// It states a different value for the same subject: it supersedes the existing one.
    Conflict { kind: ConflictKind },
    /// It states the same thing (any phrasing, person or language): it is a duplicate.
    Same,
    /// Neither, or the rules cannot tell.
    Unrelated,
}

/// What a new memory does to the candidates it was compared with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resolution {
    /// The existing memories it contradicts, in the order given. Empty when it is a duplicate:
    /// a duplicate is not stored, so it supersedes nothing.
    pub supersedes: Vec<Uuid>,
    /// The first existing memory (in the order given) it duplicates.
    pub duplicate_of: Option<Uuid>,
}

/// How `new` relates to `old`, by rules. See the module doc.
pub fn relate(new: &str, old: &str) -> Relation {
    let new = read(new);
    let old = read(old);
    if new.facts.is_empty() || old.facts.is_empty() {
        return Relation::Unrelated;
    }
    let mut conflict = None;
    for a in &new.facts {
        for b in &old.facts {
            if let Pair::Conflict(kind) = compare(a, b) {
                conflict.get_or_insert(kind);
            }
        }
    }
    if let Some(kind) = conflict {
        // Superseding a compound memory would drop its other statements ("My name is Dana and
        // I live in Lisbon" is not superseded by "I moved to Porto"): only when the new one
        // answers every statement of the old does it replace it.
        let covered = old.unread == 0
            && old
                .facts
                .iter()
                .all(|b| new.facts.iter().any(|a| compare(a, b) != Pair::None));
        return if covered {
            Relation::Conflict { kind }
        } else {
            Relation::Unrelated
        };
    }
    let same_one_way = |x: &Read, y: &Read| {
        x.facts
            .iter()
            .all(|a| y.facts.iter().any(|b| compare(a, b) == Pair::Same))
    };
    if new.unread == 0 && old.unread == 0 && same_one_way(&new, &old) && same_one_way(&old, &new) {
        Relation::Same
    } else {
        Relation::Unrelated
    }
}

/// What `new` does to `existing` (the nearest memories of the same tenant and scope), by
/// [`relate`]: the first it duplicates, else every one it contradicts.
pub fn resolve(new: &str, existing: &[(Uuid, &str)]) -> Resolution {
    let mut out = Resolution::default();
    for (id, old) in existing {
        match relate(new, old) {
            Relation::Same => {
                return Resolution {
                    supersedes: Vec::new(),
                    duplicate_of: Some(*id),
                }
            }
            Relation::Conflict { .. } => out.supersedes.push(*id),
            Relation::Unrelated => {}
        }
    }
    out
}

/// The subject a fact gives a value for.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Slot {
    Name,
    /// "Call me Bob": a nickname is not a different name.
    Called,
    Home,
    Employer,
    Role,
    /// Multi-valued: one allergy does not exclude another.
    Allergy,
    /// Vegan, vegetarian, pescatarian: one at a time.
    Regime,
    /// Multi-valued diet facts: "lactose intolerant", "does not eat pork".
    DietRule,
    /// A preference between the alternatives of one group (see [`GROUPS`]).
    Pref(&'static str),
    AnswerLanguage,
    Project,
}

impl Slot {
    fn kind(&self) -> ConflictKind {
        match self {
            Slot::Name | Slot::Called => ConflictKind::Name,
            Slot::Home => ConflictKind::Home,
            Slot::Employer | Slot::Role => ConflictKind::Work,
            Slot::Allergy => ConflictKind::Allergy,
            Slot::Regime | Slot::DietRule => ConflictKind::Diet,
            Slot::Pref(_) => ConflictKind::Preference,
            Slot::AnswerLanguage => ConflictKind::AnswerLanguage,
            Slot::Project => ConflictKind::Project,
        }
    }
}

/// How the value was stated, where it changes what excludes what.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum How {
    Plain,
    /// "prefers": excludes preferring an alternative.
    Prefer,
    /// "likes": liking tea does not exclude liking coffee.
    Like,
    Dislike,
    /// "works as": "I'm a parent" and "I work as a nurse" are no contradiction, so only two
    /// "works as" exclude each other.
    WorksAs,
    /// "is working on": one may work on several things; only "my current project is" is one.
    WorkingOn,
    Current,
    /// A home given as a country: against a city it says nothing.
    Country,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Fact {
    slot: Slot,
    how: How,
    /// Normalised (lowercase, accents folded, articles and trailing details dropped); for a
    /// multi-valued slot, the set of values.
    values: BTreeSet<String>,
    negated: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pair {
    Conflict(ConflictKind),
    Same,
    None,
}

fn compare(a: &Fact, b: &Fact) -> Pair {
    if a.slot != b.slot {
        return Pair::None;
    }
    let kind = a.slot.kind();
    let equal = a.values == b.values;
    match (&a.slot, a.negated, b.negated) {
        (_, true, true) => {
            if equal && a.how == b.how {
                Pair::Same
            } else {
                Pair::None
            }
        }
        // "no longer allergic to peanuts" against "allergic to peanuts (and shellfish)".
        (_, true, false) | (_, false, true) => {
            if a.values.intersection(&b.values).next().is_some() {
                Pair::Conflict(kind)
            } else {
                Pair::None
            }
        }
        (Slot::Allergy | Slot::DietRule, false, false) => {
            if equal {
                Pair::Same
            } else {
                Pair::None
            }
        }
        (Slot::Pref(_), false, false) => match (a.how, b.how) {
            (x, y) if x == y && equal => Pair::Same,
            (How::Prefer, How::Prefer) => Pair::Conflict(kind),
            (How::Prefer | How::Like, How::Dislike) | (How::Dislike, How::Prefer | How::Like)
                if equal =>
            {
                Pair::Conflict(kind)
            }
            _ => Pair::None,
        },
        (_, false, false) => {
            if equal {
                // "works as a nurse" and "is a nurse" say the same; so do "lives in" and
                // "moved to".
                return Pair::Same;
            }
            if a.how == How::Country || b.how == How::Country {
                return if a.how == b.how {
                    Pair::Conflict(kind)
                } else {
                    Pair::None
                };
            }
            if extends(&a.values, &b.values) {
                return Pair::None;
            }
            let exclusive = match a.slot {
                Slot::Role => a.how == How::WorksAs && b.how == How::WorksAs,
                Slot::Project => a.how == How::Current || b.how == How::Current,
                _ => true,
            };
            if exclusive {
                Pair::Conflict(kind)
            } else {
                Pair::None
            }
        }
    }
}

/// Whether one single value's words start the other's ("Porto" / "Porto Alegre", "Acme" /
/// "Acme Labs"): too close to call either way.
fn extends(a: &BTreeSet<String>, b: &BTreeSet<String>) -> bool {
    let (Some(a), Some(b)) = (a.first(), b.first()) else {
        return false;
    };
    let wa: Vec<&str> = a.split(' ').collect();
    let wb: Vec<&str> = b.split(' ').collect();
    wa.starts_with(&wb) || wb.starts_with(&wa)
}

/// The facts read from a memory, and how many of its statements were not read into one.
#[derive(Debug, Default)]
struct Read {
    facts: Vec<Fact>,
    unread: usize,
}

fn read(text: &str) -> Read {
    let mut out = Read::default();
    let trimmed = text.trim();
    if fold(trimmed).starts_with("the user") {
        // Already one of the extractor's statements (or written like one).
        match statement(trimmed) {
            Some(f) => out.facts.push(f),
            None => out.unread += 1,
        }
        return out;
    }
    let mut found = RuleExtractor::found(trimmed);
    let mut negated = false;
    if found.is_empty() {
        // The extractor drops negated statements; "I'm no longer allergic to peanuts" is
        // read as "I'm allergic to peanuts", negated.
        if let Some(positive) = without_negation(trimmed) {
            found = RuleExtractor::found(&positive);
            negated = true;
        }
    }
    for f in found {
        // Instructions and preferences are read for their answer language or alternative;
        // the rest only as the kinds that have slots.
        let fact = match f.kind {
            Kind::Other | Kind::Context => None,
            _ => statement(&f.candidate.content),
        };
        match fact {
            Some(mut fact) => {
                fact.negated ^= negated;
                out.facts.push(fact);
            }
            None => out.unread += 1,
        }
    }
    out
}

/// First-person negations that the extractor drops, removed so the positive statement can be
/// read. `None` when there is none.
fn without_negation(text: &str) -> Option<String> {
    let lower = format!(
        " {} ",
        text.to_lowercase().replace(['\u{2019}', '\u{2018}'], "'")
    );
    let mut t = lower.clone();
    for (from, to) in DROPPED_NEGATIONS.iter() {
        t = t.replace(from, to);
    }
    // Spanish and Portuguese put a bare "no"/"não" before the verb ("No vivo en Madrid").
    if let Some(rest) = t.strip_prefix(" no ") {
        t = format!(" {rest}");
    }
    (t != lower).then(|| t.trim().to_string())
}

/// One third-person statement as a fact, if a pattern reads it.
fn statement(s: &str) -> Option<Fact> {
    let orig = s.trim().trim_end_matches(['.', '!']);
    if let Some(f) = positive_statement(orig) {
        return Some(f);
    }
    // "The user is no longer allergic to ...", "The user no longer lives in ...".
    let folded = fold(orig);
    for (neg, pos) in [
        (" is no longer ", " is "),
        (" is not ", " is "),
        (" isn't ", " is "),
        (" no longer ", " "),
    ] {
        if let Some(at) = folded.find(neg) {
            // The negations are ASCII: where the original holds the same bytes at the same
            // place (ASCII before it), cut from the original to keep the value's case;
            // otherwise read the folded text.
            let same_place = orig.get(..at).is_some_and(str::is_ascii)
                && orig
                    .get(at..at + neg.len())
                    .is_some_and(|x| x.eq_ignore_ascii_case(neg));
            let base = if same_place { orig } else { folded.as_str() };
            let positive = format!("{}{pos}{}", &base[..at], &base[at + neg.len()..]);
            let mut f = positive_statement(&positive)?;
            f.negated = true;
            return Some(f);
        }
    }
    None
}

/// `orig` read by the patterns; values are cut from `orig` itself, so their case is kept
/// for [`value`] (which folds them after looking at it).
fn positive_statement(orig: &str) -> Option<Fact> {
    let s = fold(orig);
    if let Some(lang) = answer_language(&s) {
        return Some(single(
            Slot::AnswerLanguage,
            How::Plain,
            lang.to_lowercase(),
        ));
    }
    for (phrase, slot, value) in DIETS.iter() {
        if s == *phrase || s.starts_with(&format!("{phrase} ")) {
            return Some(single(slot.clone(), How::Plain, value.to_string()));
        }
    }
    // The text after an ASCII prefix of `s`, cut from the original when it starts the same.
    let after = |prefix: &str| -> Option<String> {
        s.strip_prefix(prefix)?;
        Some(match orig.get(prefix.len()..) {
            Some(rest) if orig[..prefix.len()].eq_ignore_ascii_case(prefix) => rest.to_string(),
            _ => s[prefix.len()..].to_string(),
        })
    };
    for (prefix, slot, how) in PATTERNS.iter() {
        let Some(rest) = after(prefix) else {
            continue;
        };
        let rest = rest.as_str();
        return match slot {
            Slot::Allergy => allergy(rest),
            Slot::Pref(_) => preference(rest, *how),
            Slot::Home => home(rest),
            Slot::DietRule => {
                let v = value(rest)?;
                Some(single(Slot::DietRule, How::Plain, format!("not eat {v}")))
            }
            Slot::Role => Some(single(Slot::Role, *how, role(rest)?)),
            _ => Some(single(slot.clone(), *how, value(rest)?)),
        };
    }
    // "The user is a nurse": a role, unless a diet said it ("a vegan"), matched above.
    for prefix in ["the user is a ", "the user is an "] {
        if let Some(rest) = after(prefix) {
            return Some(single(Slot::Role, How::Plain, role(&rest)?));
        }
    }
    None
}

fn single(slot: Slot, how: How, v: String) -> Fact {
    Fact {
        slot,
        how,
        values: BTreeSet::from([v]),
        negated: false,
    }
}

/// A single value normalised: folded, cut at the first detail, without leading articles or
/// company suffixes, an exonym mapped to one name. `None` when vague or empty.
fn value(raw: &str) -> Option<String> {
    // Portuguese "a" is "the" ("Trabalho para a Embraer"): before a capitalised name it is
    // an article, not the English "a" of a vague value.
    let raw = match raw.trim_start().strip_prefix("a ") {
        Some(name) if name.starts_with(char::is_uppercase) => name,
        _ => raw,
    };
    let raw = fold(raw);
    let cut = raw
        .split([',', ';', '(', ':', '.', '!', '?', '"'])
        .next()
        .unwrap_or_default();
    let mut words: Vec<&str> = Vec::new();
    for w in cut.split_whitespace() {
        if VALUE_ENDS.contains(&w) || w.chars().any(|c| c.is_ascii_digit()) {
            break;
        }
        words.push(w);
    }
    // Leading articles go ("la Caixa" is still "caixa" against "Caixa"); an indefinite one
    // makes the value vague, checked first.
    if words.first().is_some_and(|w| VAGUE.contains(w)) {
        return None;
    }
    while words.first().is_some_and(|w| LEADING.contains(w)) {
        words.remove(0);
        if words.first().is_some_and(|w| VAGUE.contains(w)) {
            return None;
        }
    }
    let mut words: Vec<String> = words
        .iter()
        .map(|w| {
            w.trim_start_matches("l'")
                .trim_end_matches('\'')
                .to_string()
        })
        .filter(|w| !w.is_empty())
        .collect();
    while words
        .last()
        .is_some_and(|w| words.len() > 1 && COMPANY_SUFFIXES.contains(&w.as_str()))
    {
        words.pop();
    }
    if words.is_empty() {
        return None;
    }
    let v = words.join(" ");
    Some(
        EXONYMS
            .iter()
            .find(|(_, names)| names.contains(&v.as_str()))
            .map_or(v, |(one, _)| one.to_string()),
    )
}

/// A role: its article says nothing ("a nurse" is a particular role, unlike "a startup").
fn role(rest: &str) -> Option<String> {
    let words: Vec<&str> = rest.split_whitespace().collect();
    let skip = usize::from(words.first().is_some_and(|w| {
        matches!(
            fold(w).as_str(),
            "a" | "an" | "un" | "una" | "um" | "uma" | "une" | "ein" | "eine"
        )
    }));
    value(&words[skip.min(words.len())..].join(" "))
}

fn home(rest: &str) -> Option<Fact> {
    let v = value(rest)?;
    if REGIONS.contains(&v.as_str()) {
        return None;
    }
    match COUNTRIES
        .iter()
        .find(|(_, names)| names.contains(&v.as_str()))
    {
        Some((one, _)) => Some(single(Slot::Home, How::Country, one.to_string())),
        None => Some(single(Slot::Home, How::Plain, v)),
    }
}

/// "peanuts and shellfish" -> {peanut, shellfish}. `None` when no item is specific.
fn allergy(rest: &str) -> Option<Fact> {
    let rest = fold(rest);
    let cut = rest.split(['.', ';', '(', '!']).next().unwrap_or_default();
    let mut values = BTreeSet::new();
    let mut item: Vec<&str> = Vec::new();
    let mut items: Vec<Vec<&str>> = Vec::new();
    for w in cut.split(|c: char| c.is_whitespace() || c == ',') {
        if w.is_empty() {
            continue;
        }
        if matches!(
            w,
            "and" | "or" | "y" | "o" | "e" | "ou" | "et" | "und" | "oder"
        ) {
            items.push(std::mem::take(&mut item));
        } else {
            item.push(w);
        }
    }
    items.push(item);
    for mut words in items {
        while words.first().is_some_and(|w| LEADING.contains(w)) {
            words.remove(0);
        }
        if words.is_empty() {
            continue;
        }
        let v = words.join(" ");
        match ALLERGENS
            .iter()
            .find(|(_, names)| names.contains(&v.as_str()))
        {
            Some((one, _)) => values.insert(one.to_string()),
            None if VAGUE.contains(&words[0]) || v == "anything" || v == "something" => continue,
            None => values.insert(v.trim_end_matches('s').to_string()),
        };
    }
    (!values.is_empty()).then_some(Fact {
        slot: Slot::Allergy,
        how: How::Plain,
        values,
        negated: false,
    })
}

/// A preference read as the alternative of a group it names first ("tea over coffee" is
/// tea). `None` when it names none, or its group's subject is missing.
fn preference(rest: &str, how: How) -> Option<Fact> {
    let rest = fold(rest);
    let words: Vec<&str> = rest
        .split(|c: char| !(c.is_alphanumeric() || c == '-' || c == '\''))
        .filter(|w| !w.is_empty())
        .collect();
    // "wants the assistant not to use tabs" prefers nothing.
    if negates(&words) {
        return None;
    }
    let mut best: Option<(usize, &'static str, &'static str)> = None;
    for group in GROUPS.iter() {
        let needs = &group.needs;
        if !needs.is_empty() && !needs.iter().any(|n| words.contains(&fold(n).as_str())) {
            continue;
        }
        for (alt, names) in &group.alternatives {
            for name in names {
                let name = fold(name);
                let phrase: Vec<&str> = name.split(' ').collect();
                if let Some(at) = words.windows(phrase.len()).position(|w| w == phrase) {
                    if best.is_none_or(|(b, _, _)| at < b) {
                        best = Some((at, group.name, alt));
                    }
                }
            }
        }
    }
    let (_, group, alt) = best?;
    Some(single(Slot::Pref(group), how, alt.to_string()))
}

/// The language answers are wanted in ("The user wants answers in Spanish", "... prefers
/// respuestas en español"), unless the statement negates it.
fn answer_language(s: &str) -> Option<&'static str> {
    let words: Vec<&str> = s
        .split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '-'))
        .filter(|w| !w.is_empty())
        .collect();
    let about_answers = words
        .iter()
        .any(|w| ANSWER_WORDS.iter().any(|a| w.starts_with(a)))
        || ANSWER_PHRASES.iter().any(|p| s.contains(p));
    if !about_answers || negates(&words) {
        return None;
    }
    let mut found = cues::LANGUAGES
        .iter()
        .filter(|(name, _)| words.contains(&fold(name).as_str()))
        .map(|(_, english)| *english);
    let first = found.next()?;
    // "answers in English or Spanish" chooses neither.
    found.all(|l| l == first).then_some(first)
}

/// Whether one of the words is a negation of the five languages ("not", "nunca", "pas"...).
fn negates(words: &[&str]) -> bool {
    words
        .iter()
        .any(|w| cues::NEGATIONS.iter().any(|n| fold(n) == *w))
}

/// Lowercase, typographic apostrophes as `'`, the accents of the five languages dropped.
fn fold(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars().flat_map(char::to_lowercase) {
        match c {
            'á' | 'à' | 'â' | 'ä' | 'ã' | 'å' => out.push('a'),
            'é' | 'è' | 'ê' | 'ë' => out.push('e'),
            'í' | 'ì' | 'î' | 'ï' => out.push('i'),
            'ó' | 'ò' | 'ô' | 'ö' | 'õ' => out.push('o'),
            'ú' | 'ù' | 'û' | 'ü' => out.push('u'),
            'ç' => out.push('c'),
            'ñ' => out.push('n'),
            'ß' => out.push_str("ss"),
            'œ' => out.push_str("oe"),
            '\u{2019}' | '\u{2018}' => out.push('\''),
            c => out.push(c),
        }
    }
    out
}

/// Decides what a new memory does to existing ones: by rules ([`RuleResolver`]) or by a chat
/// model ([`ChatConflictJudge`]). Blocking (may call a remote model): async callers use
/// `spawn_blocking`.
pub trait Resolver: Send + Sync {
    /// What `new` does to `existing` (the nearest memories of the same tenant and scope).
    /// `gone()` is asked before a retry, as [`super::Extractor::extract_unless_gone`] does.
    fn resolve(
        &self,
        new: &str,
        existing: &[(Uuid, &str)],
        gone: &dyn Fn() -> bool,
    ) -> Result<Resolution, ExtractError>;
}

/// The embedded rules: [`resolve`]; never fails.
#[derive(Debug, Clone, Copy, Default)]
pub struct RuleResolver;

impl Resolver for RuleResolver {
    fn resolve(
        &self,
        new: &str,
        existing: &[(Uuid, &str)],
        _gone: &dyn Fn() -> bool,
    ) -> Result<Resolution, ExtractError> {
        Ok(resolve(new, existing))
    }
}

#[cfg(test)]
mod tests;
