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
//! [`ChatConflictJudge`] lets an OpenAI-compatible chat model decide instead, with the
//! extraction provider's timeout, retry and error type.

use std::collections::BTreeSet;

use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::cues::{self, Kind};
use super::openai::{completion_content, strip_fence};
use super::rules::RuleExtractor;
use super::{ExtractError, OpenAiChatConfig, OpenAiChatExtractor};
use crate::openai_compat::snippet;

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
    for (from, to) in [
        (" no longer ", " "),
        (" not anymore ", " "),
        (" anymore ", " "),
        (" any more ", " "),
        (" don't ", " "),
        (" do not ", " "),
        (" i'm not ", " i'm "),
        (" i am not ", " i am "),
        (" ya no ", " "),
        (" já não ", " "),
        (" não ", " "),
        (" mais ", " "),
        (" je ne ", " je "),
        (" je n'", " j'"),
        (" plus ", " "),
        (" pas ", " "),
        (" nicht mehr ", " "),
        (" nicht ", " "),
    ] {
        t = t.replace(from, to);
    }
    // Spanish and Portuguese put a bare "no"/"não" before the verb ("No vivo en Madrid").
    if let Some(rest) = t.strip_prefix(" no ") {
        t = format!(" {rest}");
    }
    (t != lower).then(|| t.trim().to_string())
}

/// Third-person patterns, longest first where one starts another. Each is matched on the
/// folded (lowercase, accent-free) statement.
const PATTERNS: &[(&str, Slot, How)] = &[
    ("the user's name is ", Slot::Name, How::Plain),
    ("the user's first name is ", Slot::Name, How::Plain),
    ("the user's full name is ", Slot::Name, How::Plain),
    ("the user is called ", Slot::Name, How::Plain),
    ("the user wants to be called ", Slot::Called, How::Plain),
    (
        "the user wants to be addressed as ",
        Slot::Called,
        How::Plain,
    ),
    ("the user lives in ", Slot::Home, How::Plain),
    ("the user is living in ", Slot::Home, How::Plain),
    ("the user moved to ", Slot::Home, How::Plain),
    ("the user has moved to ", Slot::Home, How::Plain),
    ("the user recently moved to ", Slot::Home, How::Plain),
    ("the user is based in ", Slot::Home, How::Plain),
    ("the user resides in ", Slot::Home, How::Plain),
    ("the user works at ", Slot::Employer, How::Plain),
    ("the user works for ", Slot::Employer, How::Plain),
    ("the user is employed at ", Slot::Employer, How::Plain),
    ("the user is employed by ", Slot::Employer, How::Plain),
    ("the user works as ", Slot::Role, How::WorksAs),
    ("the user's job is ", Slot::Role, How::WorksAs),
    ("the user's job title is ", Slot::Role, How::WorksAs),
    ("the user is allergic to ", Slot::Allergy, How::Plain),
    ("the user has an allergy to ", Slot::Allergy, How::Plain),
    ("the user does not eat ", Slot::DietRule, How::Plain),
    ("the user doesn't eat ", Slot::DietRule, How::Plain),
    ("the user never eats ", Slot::DietRule, How::Plain),
    ("the user does not drink ", Slot::DietRule, How::Plain),
    ("the user doesn't drink ", Slot::DietRule, How::Plain),
    (
        "the user's current project is ",
        Slot::Project,
        How::Current,
    ),
    ("the user's project is ", Slot::Project, How::Current),
    (
        "the user is currently working on ",
        Slot::Project,
        How::WorkingOn,
    ),
    ("the user is working on ", Slot::Project, How::WorkingOn),
    ("the user prefers ", Slot::Pref(""), How::Prefer),
    ("the user would prefer ", Slot::Pref(""), How::Prefer),
    ("the user would rather ", Slot::Pref(""), How::Prefer),
    ("the user's favourite ", Slot::Pref(""), How::Prefer),
    ("the user's favorite ", Slot::Pref(""), How::Prefer),
    ("the user always wants ", Slot::Pref(""), How::Prefer),
    ("the user wants ", Slot::Pref(""), How::Prefer),
    ("the user likes ", Slot::Pref(""), How::Like),
    ("the user loves ", Slot::Pref(""), How::Like),
    ("the user enjoys ", Slot::Pref(""), How::Like),
    ("the user is a big fan of ", Slot::Pref(""), How::Like),
    ("the user dislikes ", Slot::Pref(""), How::Dislike),
    ("the user hates ", Slot::Pref(""), How::Dislike),
    ("the user doesn't like ", Slot::Pref(""), How::Dislike),
    ("the user does not like ", Slot::Pref(""), How::Dislike),
    ("the user can't stand ", Slot::Pref(""), How::Dislike),
    ("the user cannot stand ", Slot::Pref(""), How::Dislike),
    ("the user is not a fan of ", Slot::Pref(""), How::Dislike),
];

/// Diet regimes and diet facts said as "The user is ...".
const DIETS: &[(&str, Slot, &str)] = &[
    ("the user is vegan", Slot::Regime, "vegan"),
    ("the user is a vegan", Slot::Regime, "vegan"),
    ("the user follows a vegan diet", Slot::Regime, "vegan"),
    ("the user is vegetarian", Slot::Regime, "vegetarian"),
    ("the user is a vegetarian", Slot::Regime, "vegetarian"),
    (
        "the user follows a vegetarian diet",
        Slot::Regime,
        "vegetarian",
    ),
    ("the user is pescatarian", Slot::Regime, "pescatarian"),
    ("the user is a pescatarian", Slot::Regime, "pescatarian"),
    ("the user is lactose intolerant", Slot::DietRule, "lactose"),
    ("the user is gluten intolerant", Slot::DietRule, "gluten"),
    ("the user has coeliac disease", Slot::DietRule, "gluten"),
    ("the user has celiac disease", Slot::DietRule, "gluten"),
    ("the user is coeliac", Slot::DietRule, "gluten"),
    ("the user is celiac", Slot::DietRule, "gluten"),
    ("the user keeps kosher", Slot::DietRule, "kosher"),
    ("the user eats halal", Slot::DietRule, "halal"),
];

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
    for (phrase, slot, value) in DIETS {
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
    for (prefix, slot, how) in PATTERNS {
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

/// Words that end a value: what follows is a detail ("Lisbon with two cats", "Acme as an
/// engineer", "Porto since 2020").
const VALUE_ENDS: &[&str] = &[
    "with",
    "since",
    "for",
    "and",
    "as",
    "now",
    "currently",
    "because",
    "where",
    "which",
    "who",
    "near",
    "again",
    "anymore",
    "con",
    "desde",
    "ahora",
    "porque",
    "com",
    "agora",
    "avec",
    "depuis",
    "maintenant",
    "car",
    "mit",
    "seit",
    "jetzt",
    "weil",
    "y",
    "e",
    "et",
    "und",
    "como",
    "comme",
    "als",
];

/// Articles and prepositions a value may start with; they say nothing about it.
const LEADING: &[&str] = &[
    "the", "el", "la", "los", "las", "lo", "o", "os", "as", "le", "les", "l'", "der", "die", "das",
    "dem", "den", "al", "a", "à", "au", "aux", "em", "no", "na", "en", "in", "im", "bei", "chez",
    "at", "to",
];

/// A value that names no particular place or employer.
const VAGUE: &[&str] = &[
    "a",
    "an",
    "un",
    "una",
    "uno",
    "um",
    "uma",
    "une",
    "ein",
    "eine",
    "einer",
    "einem",
    "einen",
    "some",
    "home",
    "abroad",
    "here",
    "there",
    "myself",
    "freelance",
    "remote",
    "remotely",
    "town",
    "city",
    "suburbs",
    "countryside",
    "downtown",
    "same",
    "north",
    "south",
    "east",
    "west",
    "centre",
    "center",
    "it",
    "this",
    "that",
];

/// Company suffixes: "Acme Corp" is Acme.
const COMPANY_SUFFIXES: &[&str] = &[
    "inc",
    "corp",
    "corporation",
    "ltd",
    "llc",
    "gmbh",
    "ag",
    "sa",
    "s.a",
    "sl",
    "plc",
    "co",
];

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

/// Places spelt differently in the five languages (folded).
const EXONYMS: &[(&str, &[&str])] = &[
    ("lisbon", &["lisbon", "lisboa", "lisbonne", "lissabon"]),
    ("porto", &["porto", "oporto"]),
    ("munich", &["munich", "munchen", "munique", "munchen"]),
    ("cologne", &["cologne", "koln", "colonia"]),
    ("vienna", &["vienna", "wien", "viena", "vienne"]),
    ("london", &["london", "londres", "londra"]),
    ("rome", &["rome", "roma", "rom"]),
    ("milan", &["milan", "milano", "milao", "mailand"]),
    (
        "florence",
        &["florence", "florencia", "florenca", "florenz", "firenze"],
    ),
    ("naples", &["naples", "napoles", "napoli", "neapel"]),
    (
        "venice",
        &[
            "venice", "venecia", "veneza", "venise", "venedig", "venezia",
        ],
    ),
    ("prague", &["prague", "praga", "prag"]),
    ("warsaw", &["warsaw", "varsovia", "varsovie", "warschau"]),
    (
        "brussels",
        &["brussels", "bruselas", "bruxelas", "bruxelles", "brussel"],
    ),
    (
        "geneva",
        &["geneva", "ginebra", "genebra", "geneve", "genf"],
    ),
    ("zurich", &["zurich", "zurique"]),
    ("athens", &["athens", "atenas", "athenes", "athen"]),
    ("seville", &["seville", "sevilla", "sevilha"]),
    ("copenhagen", &["copenhagen", "copenhague", "kopenhagen"]),
    ("moscow", &["moscow", "moscu", "moscou", "moskau"]),
    (
        "new york",
        &["new york", "nueva york", "nova iorque", "nova york"],
    ),
    ("berlin", &["berlin", "berlim"]),
    ("paris", &["paris"]),
    ("barcelona", &["barcelona", "barcelone"]),
    ("hamburg", &["hamburg", "hamburgo", "hambourg"]),
];

/// Countries (folded, the five languages): a home given as one is not compared with a city.
const COUNTRIES: &[(&str, &[&str])] = &[
    ("portugal", &["portugal"]),
    (
        "spain",
        &["spain", "espana", "espanha", "espagne", "spanien"],
    ),
    ("france", &["france", "francia", "franca", "frankreich"]),
    (
        "germany",
        &[
            "germany",
            "alemania",
            "alemanha",
            "allemagne",
            "deutschland",
        ],
    ),
    ("italy", &["italy", "italia", "italie", "italien"]),
    (
        "uk",
        &[
            "uk",
            "england",
            "inglaterra",
            "angleterre",
            "united kingdom",
            "reino unido",
            "royaume-uni",
            "großbritannien",
            "grossbritannien",
        ],
    ),
    (
        "usa",
        &[
            "usa",
            "us",
            "united states",
            "estados unidos",
            "etats-unis",
            "vereinigte staaten",
        ],
    ),
    ("brazil", &["brazil", "brasil", "bresil", "brasilien"]),
    ("mexico", &["mexico", "mexique", "mexiko"]),
    ("canada", &["canada", "kanada"]),
    (
        "switzerland",
        &["switzerland", "suiza", "suica", "suisse", "schweiz"],
    ),
    ("austria", &["austria", "autriche", "osterreich"]),
    (
        "netherlands",
        &[
            "netherlands",
            "holland",
            "holanda",
            "paises bajos",
            "paises baixos",
            "pays-bas",
            "niederlande",
        ],
    ),
    ("belgium", &["belgium", "belgica", "belgique", "belgien"]),
    ("argentina", &["argentina", "argentine", "argentinien"]),
    ("ireland", &["ireland", "irlanda", "irlande", "irland"]),
    ("japan", &["japan", "japon", "japao"]),
    ("chile", &["chile", "chili"]),
    ("colombia", &["colombia", "colombie", "kolumbien"]),
];

/// Regions: neither a country nor a city, so never compared.
const REGIONS: &[&str] = &[
    "bavaria",
    "bayern",
    "baviera",
    "baviere",
    "catalonia",
    "cataluna",
    "catalunha",
    "catalogne",
    "katalonien",
    "andalusia",
    "andalucia",
    "andaluzia",
    "andalousie",
    "algarve",
    "provence",
    "brittany",
    "bretagne",
    "tuscany",
    "toscana",
    "toscane",
    "california",
    "texas",
    "alentejo",
    "galicia",
    "galiza",
    "normandy",
    "normandie",
    "europe",
    "europa",
];

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

/// Allergens under their names in the five languages (folded).
const ALLERGENS: &[(&str, &[&str])] = &[
    (
        "peanut",
        &[
            "peanut",
            "peanuts",
            "cacahuete",
            "cacahuetes",
            "cacahuate",
            "cacahuates",
            "mani",
            "amendoim",
            "amendoins",
            "arachide",
            "arachides",
            "cacahuete",
            "cacahuetes",
            "erdnuss",
            "erdnusse",
            "erdnussen",
        ],
    ),
    (
        "tree nut",
        &[
            "nuts",
            "tree nuts",
            "nut",
            "frutos secos",
            "nueces",
            "nozes",
            "frutos de casca rija",
            "noix",
            "fruits a coque",
            "nusse",
            "nussen",
            "baumnusse",
        ],
    ),
    (
        "shellfish",
        &[
            "shellfish",
            "marisco",
            "mariscos",
            "fruits de mer",
            "crustaces",
            "meeresfruchte",
            "schalentiere",
            "schalentieren",
            "crustaceos",
            "camarao",
            "camaroes",
            "shrimp",
            "prawns",
            "gambas",
        ],
    ),
    ("penicillin", &["penicillin", "penicilina", "penicilline"]),
    ("gluten", &["gluten"]),
    ("lactose", &["lactose", "lactosa", "laktose"]),
    (
        "milk",
        &[
            "milk",
            "leche",
            "leite",
            "lait",
            "milch",
            "dairy",
            "lacteos",
            "laticinios",
            "produits laitiers",
            "milchprodukte",
        ],
    ),
    (
        "egg",
        &[
            "egg", "eggs", "huevo", "huevos", "ovo", "ovos", "oeuf", "oeufs", "œufs", "eier",
            "eiern", "ei",
        ],
    ),
    (
        "cat",
        &[
            "cat", "cats", "gato", "gatos", "chat", "chats", "katze", "katzen",
        ],
    ),
    (
        "dog",
        &[
            "dog",
            "dogs",
            "perro",
            "perros",
            "cao",
            "caes",
            "cachorro",
            "cachorros",
            "chien",
            "chiens",
            "hund",
            "hunde",
            "hunden",
        ],
    ),
    ("pollen", &["pollen", "polen"]),
    (
        "bee",
        &[
            "bee",
            "bees",
            "bee stings",
            "abeja",
            "abejas",
            "abelha",
            "abelhas",
            "abeille",
            "abeilles",
            "biene",
            "bienen",
            "bienenstiche",
        ],
    ),
    ("fish", &["fish", "pescado", "peixe", "poisson", "fisch"]),
    ("soy", &["soy", "soya", "soja"]),
    ("sesame", &["sesame", "sesamo", "gergelim", "sesam"]),
    ("latex", &["latex"]),
    (
        "dust",
        &[
            "dust",
            "dust mites",
            "polvo",
            "acaros",
            "po",
            "poussiere",
            "acariens",
            "staub",
            "hausstaub",
        ],
    ),
    (
        "strawberry",
        &[
            "strawberry",
            "strawberries",
            "fresa",
            "fresas",
            "morango",
            "morangos",
            "fraise",
            "fraises",
            "erdbeere",
            "erdbeeren",
        ],
    ),
    ("aspirin", &["aspirin", "aspirina", "aspirine"]),
    ("ibuprofen", &["ibuprofen", "ibuprofeno", "ibuprofene"]),
    ("wheat", &["wheat", "trigo", "ble", "weizen"]),
];

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

/// Groups of alternatives one prefers one of: (group, what must also be said for the
/// alternatives to be about it, alternatives with their words in the five languages). Words
/// are matched as whole words, both sides folded as [`fold`] does.
type Group = (
    &'static str,
    &'static [&'static str],
    &'static [(&'static str, &'static [&'static str])],
);
const GROUPS: &[Group] = &[
    (
        "drink",
        &[],
        &[
            (
                "tea",
                &["tea", "té", "chá", "thé", "tee", "grüner tee", "green tea"],
            ),
            ("coffee", &["coffee", "café", "kaffee", "espresso"]),
        ],
    ),
    (
        "indentation",
        &[],
        &[
            (
                "tabs",
                &[
                    "tabs",
                    "tab",
                    "tabulaciones",
                    "tabuladores",
                    "tabulações",
                    "tabulations",
                    "tabulatoren",
                ],
            ),
            (
                "spaces",
                &["spaces", "espacios", "espaços", "espaces", "leerzeichen"],
            ),
        ],
    ),
    (
        "theme",
        &[],
        &[
            (
                "dark",
                &[
                    "dark mode",
                    "dark theme",
                    "modo oscuro",
                    "tema oscuro",
                    "modo escuro",
                    "tema escuro",
                    "mode sombre",
                    "thème sombre",
                    "dunkelmodus",
                    "dark-mode",
                    "dunkles design",
                    "dunklen modus",
                ],
            ),
            (
                "light",
                &[
                    "light mode",
                    "light theme",
                    "modo claro",
                    "tema claro",
                    "mode clair",
                    "thème clair",
                    "hellmodus",
                    "helles design",
                    "hellen modus",
                ],
            ),
        ],
    ),
    (
        "units",
        &[],
        &[
            (
                "metric",
                &[
                    "metric",
                    "métrico",
                    "métricas",
                    "sistema métrico",
                    "métrique",
                    "metrisch",
                    "metrische",
                ],
            ),
            (
                "imperial",
                &[
                    "imperial",
                    "imperiales",
                    "impérial",
                    "impériales",
                    "imperiale",
                    "imperialen",
                ],
            ),
        ],
    ),
    (
        "length",
        &[
            "answer",
            "answers",
            "reply",
            "replies",
            "response",
            "responses",
            "explanation",
            "explanations",
            "respuesta",
            "respuestas",
            "resposta",
            "respostas",
            "réponse",
            "réponses",
            "antwort",
            "antworten",
            "erklärungen",
        ],
        &[
            (
                "short",
                &[
                    "short", "brief", "concise", "corta", "cortas", "breve", "breves", "concisa",
                    "concisas", "curta", "curtas", "courte", "courtes", "concise", "concises",
                    "kurze", "kurz", "knappe", "knapp",
                ],
            ),
            (
                "long",
                &[
                    "long",
                    "detailed",
                    "lengthy",
                    "larga",
                    "largas",
                    "detallada",
                    "detalladas",
                    "longa",
                    "longas",
                    "detalhada",
                    "detalhadas",
                    "longue",
                    "longues",
                    "détaillée",
                    "détaillées",
                    "lange",
                    "ausführliche",
                    "ausführlich",
                    "detaillierte",
                ],
            ),
        ],
    ),
    (
        "format",
        &[],
        &[
            (
                "bullets",
                &[
                    "bullet points",
                    "bullets",
                    "bullet lists",
                    "viñetas",
                    "listas",
                    "tópicos",
                    "marcadores",
                    "puces",
                    "listes à puces",
                    "stichpunkte",
                    "aufzählungen",
                ],
            ),
            (
                "prose",
                &[
                    "prose",
                    "paragraphs",
                    "párrafos",
                    "prosa",
                    "parágrafos",
                    "paragraphes",
                    "fließtext",
                    "absätze",
                ],
            ),
        ],
    ),
    (
        "editor",
        &[],
        &[
            ("vim", &["vim", "neovim"]),
            ("emacs", &["emacs"]),
            ("vscode", &["vs code", "vscode", "visual studio code"]),
        ],
    ),
    (
        "pet",
        &[],
        &[
            ("cats", &["cats", "gatos", "chats", "katzen"]),
            (
                "dogs",
                &["dogs", "perros", "cães", "cachorros", "chiens", "hunde"],
            ),
        ],
    ),
];

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
    for (group, needs, alternatives) in GROUPS {
        if !needs.is_empty() && !needs.iter().any(|n| words.contains(&fold(n).as_str())) {
            continue;
        }
        for (alt, names) in *alternatives {
            for name in *names {
                let name = fold(name);
                let phrase: Vec<&str> = name.split(' ').collect();
                if let Some(at) = words.windows(phrase.len()).position(|w| w == phrase) {
                    if best.is_none_or(|(b, _, _)| at < b) {
                        best = Some((at, group, alt));
                    }
                }
            }
        }
    }
    let (_, group, alt) = best?;
    Some(single(Slot::Pref(group), how, alt.to_string()))
}

/// Words that make a statement about the assistant's answers: folded word starts, matched
/// on whole words ("responsible" is not one: "respond" must start it).
const ANSWER_WORDS: &[&str] = &[
    "answer",
    "reply",
    "replies",
    "respond",
    "response",
    "respuesta",
    "resposta",
    "responda",
    "responde",
    "repond",
    "reponse",
    "antwort",
    "escribeme",
    "escreva",
    "ecris-moi",
    "ecrivez",
];

/// Phrases that do the same ("write to me in French").
const ANSWER_PHRASES: &[&str] = &[
    "write to me",
    "write me",
    "speak to me",
    "talk to me",
    "schreib mir",
    "schreibe mir",
];

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

/// Sent as the system message of the conflict judge; the user message carries the new memory
/// and the candidates as JSON.
pub const CONFLICT_PROMPT: &str = r#"You compare a new memory about a user with existing memories about the same user.
The input is a JSON object: {"new": "<new memory>", "existing": [{"id": "<id>", "content": "<memory>"}]}.
Return ONLY a JSON object of the form:
{"contradicts": ["<id>", ...], "duplicates": ["<id>", ...]}
- "contradicts": the existing memories the new one makes out of date because it states a different value for the same single-valued fact about the user: their name, where they live, where or as what they work, their diet (vegan, vegetarian...), an allergy they no longer have, a preference between alternatives (tea or coffee, tabs or spaces, the language of answers), their current project.
- "duplicates": the existing memories that say the same thing as the new one, in any words or language.
Facts that can both be true are neither: two different allergies, liking two things, a city and its country, someone else's fact (e.g. "my sister lives in Rome").
Use only ids from the input. If none apply, return {"contradicts": [], "duplicates": []}."#;

/// The conflict decision by an OpenAI-compatible chat model: one call per candidate batch,
/// through the same client, timeout, retry and errors as [`OpenAiChatExtractor`], so a
/// failure is [`ExtractError::Provider`] (502 at the HTTP layer) as extraction's is.
pub struct ChatConflictJudge {
    chat: OpenAiChatExtractor,
}

impl ChatConflictJudge {
    /// Builds the client; does not contact the provider.
    pub fn new(config: OpenAiChatConfig) -> Result<Self, ExtractError> {
        Ok(Self {
            chat: OpenAiChatExtractor::new(config)?,
        })
    }
}

#[derive(Serialize)]
struct JudgeInput<'a> {
    new: &'a str,
    existing: Vec<JudgeCandidate<'a>>,
}

#[derive(Serialize)]
struct JudgeCandidate<'a> {
    id: String,
    content: &'a str,
}

impl Resolver for ChatConflictJudge {
    fn resolve(
        &self,
        new: &str,
        existing: &[(Uuid, &str)],
        gone: &dyn Fn() -> bool,
    ) -> Result<Resolution, ExtractError> {
        // Nothing to compare with: no call, no cost.
        if existing.is_empty() {
            return Ok(Resolution::default());
        }
        let input = JudgeInput {
            new,
            existing: existing
                .iter()
                .map(|(id, content)| JudgeCandidate {
                    id: id.to_string(),
                    content,
                })
                .collect(),
        };
        let user = serde_json::to_string(&input)
            .map_err(|e| ExtractError::Provider(format!("cannot encode the candidates: {e}")))?;
        let body = self.chat.complete(CONFLICT_PROMPT, user, gone)?;
        parse_judgement(&body, existing)
    }
}

/// The model's answer as a [`Resolution`] over `batch`. The content must be a JSON object with
/// `contradicts` and `duplicates` arrays of strings (else a provider error: the model did not
/// answer the question); an id that is not one of the batch's is ignored (a model may invent
/// or mangle one, and it must never name another memory). The result is in batch order, as
/// the rules give it: the first duplicate, or every contradicted one.
pub(crate) fn parse_judgement(
    body: &str,
    batch: &[(Uuid, &str)],
) -> Result<Resolution, ExtractError> {
    let content = completion_content(body)?;
    let value: Value = serde_json::from_str(strip_fence(&content)).map_err(|e| {
        ExtractError::Provider(format!(
            "model output is not JSON: {e}; content: {}",
            snippet(&content)
        ))
    })?;
    let ids = |field: &str| -> Result<Vec<Uuid>, ExtractError> {
        let items = value.get(field).and_then(Value::as_array).ok_or_else(|| {
            ExtractError::Provider(format!(
                "model output lacks a \"{field}\" array: {}",
                snippet(&content)
            ))
        })?;
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            let id = item.as_str().ok_or_else(|| {
                ExtractError::Provider(format!(
                    "model output's \"{field}\" holds a non-string: {}",
                    snippet(&content)
                ))
            })?;
            match Uuid::parse_str(id.trim()) {
                Ok(id) if batch.iter().any(|(b, _)| *b == id) => out.push(id),
                _ => tracing::warn!(id, field, "ignoring an id the conflict model was not given"),
            }
        }
        Ok(out)
    };
    let contradicts = ids("contradicts")?;
    let duplicates = ids("duplicates")?;
    if let Some((id, _)) = batch.iter().find(|(b, _)| duplicates.contains(b)) {
        return Ok(Resolution {
            supersedes: Vec::new(),
            duplicate_of: Some(*id),
        });
    }
    Ok(Resolution {
        supersedes: batch
            .iter()
            .map(|(id, _)| *id)
            .filter(|id| contradicts.contains(id))
            .collect(),
        duplicate_of: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conflict(kind: ConflictKind) -> Relation {
        Relation::Conflict { kind }
    }

    #[test]
    fn the_briefs_examples_hold() {
        use ConflictKind::*;
        let cases = [
            ("I moved to Porto", "I live in Lisbon", conflict(Home)),
            ("I work at Acme", "The user works at Globex", conflict(Work)),
            ("I'm vegan", "The user is vegetarian", conflict(Diet)),
            ("My name is Dana", "The user's name is Dana", Relation::Same),
            ("Vivo en Lisboa", "The user lives in Lisbon", Relation::Same),
            (
                "I'm allergic to peanuts",
                "I'm allergic to shellfish",
                Relation::Unrelated,
            ),
            (
                "I'm no longer allergic to peanuts",
                "I'm allergic to peanuts",
                conflict(Allergy),
            ),
            (
                "My sister lives in Lisbon",
                "I live in Porto",
                Relation::Unrelated,
            ),
            ("I prefer tea", "I prefer coffee", conflict(Preference)),
            (
                "I prefer tabs",
                "The user prefers spaces",
                conflict(Preference),
            ),
            (
                "Always answer in Spanish",
                "The user wants answers in French",
                conflict(AnswerLanguage),
            ),
            ("I like tea", "I like coffee", Relation::Unrelated),
            (
                "The weather is nice",
                "I live in Porto",
                Relation::Unrelated,
            ),
            (
                "The user is responsible for the German team",
                "The user wants answers in English",
                Relation::Unrelated,
            ),
            (
                "The user writes in German at work",
                "The user wants answers in English",
                Relation::Unrelated,
            ),
            (
                "Don't use tabs",
                "The user prefers spaces",
                Relation::Unrelated,
            ),
            (
                "Antworte bitte immer auf Deutsch",
                "The user wants answers in English",
                conflict(AnswerLanguage),
            ),
        ];
        for (new, old, want) in cases {
            assert_eq!(relate(new, old), want, "{new:?} vs {old:?}");
        }
    }

    #[test]
    fn resolve_names_the_contradicted_or_the_duplicate() {
        let (a, b, c) = (Uuid::from_u128(1), Uuid::from_u128(2), Uuid::from_u128(3));
        let existing = [
            (a, "The user lives in Lisbon"),
            (b, "The user works at Globex"),
            (c, "Ich wohne in Lissabon"),
        ];
        assert_eq!(
            resolve("I moved to Porto", &existing),
            Resolution {
                supersedes: vec![a, c],
                duplicate_of: None
            }
        );
        assert_eq!(
            resolve("Moro em Lisboa", &existing),
            Resolution {
                supersedes: vec![],
                duplicate_of: Some(a)
            }
        );
        assert_eq!(resolve("I like jazz", &existing), Resolution::default());
        assert_eq!(resolve("I moved to Porto", &[]), Resolution::default());
    }

    #[test]
    fn a_compound_memory_is_superseded_only_when_covered() {
        assert_eq!(
            relate("I moved to Porto", "My name is Dana and I live in Lisbon"),
            Relation::Unrelated
        );
        assert_eq!(
            relate(
                "My name is Dana and I live in Porto",
                "My name is Dana and I live in Lisbon"
            ),
            conflict(ConflictKind::Home)
        );
    }

    #[test]
    fn odd_text_never_panics() {
        let texts = [
            "The user ís not allergic to peanuts",
            "The user is nót allergic to Straße",
            "Ich wohne nicht mehr in Köln",
            "The user works for a Ærø",
            "The user ",
            "the user is a",
            "I prefer",
            "",
            "ß",
            "The user is no longer ",
        ];
        for t in texts {
            // Every char boundary of each text, with a multi-byte letter inserted there.
            let mut cuts: Vec<usize> = t.char_indices().map(|(i, _)| i).collect();
            cuts.push(t.len());
            for at in cuts {
                let odd = format!("{}ẞí{}", &t[..at], &t[at..]);
                let _ = relate(&odd, "The user lives in Lisbon");
                let _ = relate(t, &odd);
            }
        }
        assert_eq!(
            relate(
                "The user ís not allergic to peanuts",
                "The user is allergic to peanuts"
            ),
            conflict(ConflictKind::Allergy)
        );
    }

    /// The chat judge against a real local HTTP server speaking the chat completions protocol.
    mod judge {
        use std::io::{Read, Write};
        use std::net::{SocketAddr, TcpListener, TcpStream};
        use std::sync::{Arc, Mutex};
        use std::time::Duration;

        use super::super::*;

        /// What the server answers to its n-th request: after a pause, a status and a body.
        type Script = dyn Fn(usize) -> (Duration, u16, String) + Send + Sync;

        /// The bodies of the requests received, in order.
        type Seen = Arc<Mutex<Vec<String>>>;

        fn serve(script: Arc<Script>) -> (SocketAddr, Seen) {
            let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
            let addr = listener.local_addr().expect("local addr");
            let seen: Seen = Arc::default();
            let log = seen.clone();
            std::thread::spawn(move || {
                for stream in listener.incoming().flatten() {
                    let (script, log) = (script.clone(), log.clone());
                    // One thread per connection: a slow answer must not hold up the retry.
                    std::thread::spawn(move || answer(stream, &*script, &log));
                }
            });
            (addr, seen)
        }

        fn answer(mut stream: TcpStream, script: &Script, log: &Seen) {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            let head_end = loop {
                let Ok(n) = stream.read(&mut chunk) else {
                    return;
                };
                if n == 0 {
                    return;
                }
                buf.extend_from_slice(&chunk[..n]);
                if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break at + 4;
                }
            };
            let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            while buf.len() < head_end + length {
                let Ok(n) = stream.read(&mut chunk) else {
                    return;
                };
                if n == 0 {
                    return;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            let body = String::from_utf8_lossy(&buf[head_end..head_end + length]).to_string();
            let n = {
                let mut log = log.lock().expect("log");
                log.push(body);
                log.len() - 1
            };
            let (pause, status, reply) = script(n);
            std::thread::sleep(pause);
            let _ = write!(
                stream,
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
                reply.len()
            );
        }

        fn completion(content: &str) -> String {
            serde_json::json!({"choices": [{"message": {"role": "assistant", "content": content}}]})
                .to_string()
        }

        fn judge(addr: SocketAddr) -> ChatConflictJudge {
            let mut config = OpenAiChatConfig::new(format!("http://{addr}"), "judge-model");
            config.timeout = Duration::from_millis(400);
            config.retry_backoff = Duration::from_millis(10);
            ChatConflictJudge::new(config).expect("client")
        }

        fn always(status: u16, body: String) -> Arc<Script> {
            Arc::new(move |_| (Duration::ZERO, status, body.clone()))
        }

        const A: Uuid = Uuid::from_u128(0xa);
        const B: Uuid = Uuid::from_u128(0xb);

        fn batch() -> [(Uuid, &'static str); 2] {
            [
                (A, "The user lives in Lisbon"),
                (B, "The user works at Globex"),
            ]
        }

        #[test]
        fn the_model_decides_and_ids_outside_the_batch_are_ignored() {
            let content = format!(
                r#"{{"contradicts": ["{B}", "{}", "not-an-id", "{A}"], "duplicates": []}}"#,
                Uuid::from_u128(0xc)
            );
            let (addr, seen) = serve(always(200, completion(&content)));
            let got = judge(addr)
                .resolve("I moved to Porto", &batch(), &|| false)
                .expect("answer");
            assert_eq!(
                got,
                Resolution {
                    supersedes: vec![A, B],
                    duplicate_of: None
                }
            );
            let seen = seen.lock().expect("log");
            assert_eq!(seen.len(), 1);
            let sent: Value = serde_json::from_str(&seen[0]).expect("request is JSON");
            assert_eq!(sent["model"], "judge-model");
            assert_eq!(sent["response_format"]["type"], "json_object");
            assert_eq!(sent["messages"][0]["content"], CONFLICT_PROMPT);
            let user: Value = serde_json::from_str(
                sent["messages"][1]["content"]
                    .as_str()
                    .expect("user content"),
            )
            .expect("user content is JSON");
            assert_eq!(
                user,
                serde_json::json!({"new": "I moved to Porto", "existing": [
                    {"id": A.to_string(), "content": "The user lives in Lisbon"},
                    {"id": B.to_string(), "content": "The user works at Globex"}
                ]})
            );
        }

        #[test]
        fn a_duplicate_wins_and_supersedes_nothing() {
            let content =
                format!("```json\n{{\"contradicts\": [\"{A}\"], \"duplicates\": [\"{B}\"]}}\n```");
            let (addr, _) = serve(always(200, completion(&content)));
            let got = judge(addr)
                .resolve("I work at Globex", &batch(), &|| false)
                .expect("answer");
            assert_eq!(
                got,
                Resolution {
                    supersedes: vec![],
                    duplicate_of: Some(B)
                }
            );
        }

        #[test]
        fn malformed_answers_are_provider_errors_without_retry() {
            for content in [
                "A contradicts it".to_string(),
                r#"{"contradicts": []}"#.to_string(),
                r#"{"contradicts": "all", "duplicates": []}"#.to_string(),
                r#"{"contradicts": [1], "duplicates": []}"#.to_string(),
            ] {
                let (addr, seen) = serve(always(200, completion(&content)));
                let got = judge(addr).resolve("I moved to Porto", &batch(), &|| false);
                assert!(
                    matches!(got, Err(ExtractError::Provider(_))),
                    "{content}: {got:?}"
                );
                assert_eq!(seen.lock().expect("log").len(), 1, "{content}");
            }
            let (addr, _) = serve(always(200, "<html>".into()));
            let got = judge(addr).resolve("I moved to Porto", &batch(), &|| false);
            assert!(matches!(got, Err(ExtractError::Provider(_))), "{got:?}");
        }

        #[test]
        fn a_timeout_is_retried_once_then_a_provider_error() {
            let ok = completion(r#"{"contradicts": [], "duplicates": []}"#);
            let (addr, seen) = serve(Arc::new(move |_| (Duration::from_secs(3), 200, ok.clone())));
            let got = judge(addr).resolve("I moved to Porto", &batch(), &|| false);
            match got {
                Err(ExtractError::Provider(e)) => assert!(e.contains("after retry"), "{e}"),
                other => panic!("{other:?}"),
            }
            assert_eq!(seen.lock().expect("log").len(), 2);
        }

        #[test]
        fn a_slow_first_answer_then_a_good_one_succeeds() {
            let content = format!(r#"{{"contradicts": ["{A}"], "duplicates": []}}"#);
            let ok = completion(&content);
            let (addr, seen) = serve(Arc::new(move |n| {
                let pause = if n == 0 {
                    Duration::from_secs(3)
                } else {
                    Duration::ZERO
                };
                (pause, 200, ok.clone())
            }));
            let got = judge(addr)
                .resolve("I moved to Porto", &batch(), &|| false)
                .expect("answer");
            assert_eq!(got.supersedes, vec![A]);
            assert_eq!(seen.lock().expect("log").len(), 2);
        }

        #[test]
        fn no_candidates_no_call_and_a_caller_gone_gets_no_retry() {
            let (addr, seen) = serve(always(500, "down".into()));
            let j = judge(addr);
            assert_eq!(
                j.resolve("I moved to Porto", &[], &|| false)
                    .expect("no call"),
                Resolution::default()
            );
            assert_eq!(seen.lock().expect("log").len(), 0);
            let got = j.resolve("I moved to Porto", &batch(), &|| true);
            assert!(matches!(got, Err(ExtractError::Gone)), "{got:?}");
            assert_eq!(seen.lock().expect("log").len(), 1);
        }

        #[test]
        fn the_rule_resolver_is_resolve() {
            assert_eq!(
                RuleResolver
                    .resolve("I moved to Porto", &batch(), &|| false)
                    .expect("rules never fail"),
                Resolution {
                    supersedes: vec![A],
                    duplicate_of: None
                }
            );
        }
    }

    /// The rules measured on `tests/data/conflicts/pairs.jsonl` (docs/EXTRACTION.md,
    /// "Contradictions and duplicates"): precision and recall of `conflict` and `same`,
    /// overall, per kind and per language. Each line is `{"lang", "kind", "label", "new",
    /// "old"}`, `label` one of `conflict`, `same`, `unrelated`.
    mod eval {
        use std::collections::BTreeMap;

        use serde::Deserialize;

        use super::super::*;

        #[derive(Deserialize)]
        struct Pair {
            lang: String,
            kind: String,
            label: String,
            new: String,
            old: String,
        }

        /// Per label: pairs with that gold label, pairs predicted so, and both.
        #[derive(Default, Clone, Copy)]
        struct Tally {
            gold: usize,
            predicted: usize,
            correct: usize,
        }

        impl Tally {
            fn precision(&self) -> f64 {
                if self.predicted == 0 {
                    1.0
                } else {
                    self.correct as f64 / self.predicted as f64
                }
            }
            fn recall(&self) -> f64 {
                if self.gold == 0 {
                    1.0
                } else {
                    self.correct as f64 / self.gold as f64
                }
            }
            fn cells(&self) -> String {
                format!(
                    "{} | {} | {} | {:.2} | {:.2}",
                    self.gold,
                    self.predicted,
                    self.correct,
                    self.precision(),
                    self.recall()
                )
            }
        }

        #[derive(Default, Clone, Copy)]
        struct Row {
            pairs: usize,
            conflict: Tally,
            same: Tally,
        }

        impl Row {
            fn add(&mut self, gold: &str, predicted: &str) {
                self.pairs += 1;
                for (label, t) in [("conflict", &mut self.conflict), ("same", &mut self.same)] {
                    t.gold += usize::from(gold == label);
                    t.predicted += usize::from(predicted == label);
                    t.correct += usize::from(gold == label && predicted == label);
                }
            }
            fn line(&self, name: &str) -> String {
                format!(
                    "| {name} | {} | {} | {} |",
                    self.pairs,
                    self.conflict.cells(),
                    self.same.cells()
                )
            }
        }

        fn label(r: Relation) -> &'static str {
            match r {
                Relation::Conflict { .. } => "conflict",
                Relation::Same => "same",
                Relation::Unrelated => "unrelated",
            }
        }

        fn pairs() -> Vec<Pair> {
            let path = concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/data/conflicts/pairs.jsonl"
            );
            let text = std::fs::read_to_string(path).expect("the labelled set is readable");
            text.lines()
                .filter(|l| !l.trim().is_empty())
                .map(|l| serde_json::from_str(l).expect("each line is a labelled pair"))
                .collect()
        }

        const HEADER: &str = "| {} | pairs | conflict gold | predicted | correct | precision | recall | same gold | predicted | correct | precision | recall |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |";

        #[test]
        fn rules_on_the_labelled_pairs() {
            let pairs = pairs();
            let mut all = Row::default();
            let mut by_kind: BTreeMap<&str, Row> = BTreeMap::new();
            let mut by_lang: BTreeMap<&str, Row> = BTreeMap::new();
            let mut wrong_kind = 0;
            for p in &pairs {
                assert!(
                    ["conflict", "same", "unrelated"].contains(&p.label.as_str()),
                    "label {:?}",
                    p.label
                );
                let got = relate(&p.new, &p.old);
                let predicted = label(got);
                if let Relation::Conflict { kind } = got {
                    if p.label == "conflict" && kind.label() != p.kind {
                        wrong_kind += 1;
                    }
                }
                if predicted != p.label {
                    println!(
                        "MISS [{} {}] gold {} got {predicted}: {:?} vs {:?}",
                        p.lang, p.kind, p.label, p.new, p.old
                    );
                }
                all.add(&p.label, predicted);
                by_kind.entry(&p.kind).or_default().add(&p.label, predicted);
                by_lang.entry(&p.lang).or_default().add(&p.label, predicted);
            }
            println!("{}", HEADER.replace("{}", "kind"));
            for (k, r) in &by_kind {
                println!("{}", r.line(k));
            }
            println!("{}", all.line("**all**"));
            println!();
            println!("{}", HEADER.replace("{}", "language"));
            for (l, r) in &by_lang {
                println!("{}", r.line(l));
            }
            println!(
                "{} pairs; conflicts found with another kind than labelled: {wrong_kind}",
                pairs.len()
            );
            assert!(pairs.len() >= 120, "{} pairs", pairs.len());
            assert_eq!(wrong_kind, 0);
            // The issue's floor, and recall floors at what the rules reach less a margin, so
            // that a regression fails the build.
            assert!(all.conflict.precision() >= 0.9, "{}", all.line("all"));
            assert!(all.same.precision() >= 0.9, "{}", all.line("all"));
            assert!(all.conflict.recall() >= 0.85, "{}", all.line("all"));
            assert!(all.same.recall() >= 0.9, "{}", all.line("all"));
            // Per kind and language too: a rule that breaks one kind must not hide behind the
            // others.
            for (name, r) in by_kind.iter().chain(&by_lang) {
                assert!(r.conflict.precision() >= 0.9, "{}", r.line(name));
                assert!(r.same.precision() >= 0.9, "{}", r.line(name));
            }
        }
    }
}
