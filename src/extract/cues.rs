//! The rule extractor's cue phrases, one table per language, and what each one stores; and
//! the word lists its clause reader uses. The tables themselves are data: `lexicon/cues-<lang>.txt`
//! and `lexicon/clauses.txt`, read once ([`super::lexicon`]).
//!
//! A cue is matched as whole words on the lowercased clause (typographic apostrophes folded
//! to `'`). First-person cues carry the person in the verb or the pronoun ("vivo en",
//! "j'habite", "ich wohne in", "I live in"), so "mi hermana vive en Roma" matches nothing.
//! Within a table, earlier cues win: negative forms ("no me gusta") come before the forms
//! they contain ("me gusta"). docs/EXTRACTION.md describes these tables; keep the two in step.

use std::sync::LazyLock;

use auditmem_projections::MemoryType;

use super::lexicon::{fields, fields_n, loaded, Lexicon};

/// What a stored statement is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Kind {
    Name,
    Home,
    Work,
    Allergy,
    Diet,
    Preference,
    Instruction,
    Project,
    Context,
    Other,
}

impl Kind {
    pub(crate) const ALL: [Kind; 10] = [
        Kind::Name,
        Kind::Home,
        Kind::Work,
        Kind::Allergy,
        Kind::Diet,
        Kind::Preference,
        Kind::Instruction,
        Kind::Project,
        Kind::Context,
        Kind::Other,
    ];

    pub(crate) fn memory_type(self) -> MemoryType {
        match self {
            Kind::Preference | Kind::Instruction => MemoryType::Rule,
            Kind::Project | Kind::Context => MemoryType::Context,
            _ => MemoryType::Fact,
        }
    }

    /// The kind's name in the lexicon files and the evaluation's reports.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Kind::Name => "name",
            Kind::Home => "home",
            Kind::Work => "work",
            Kind::Allergy => "allergy",
            Kind::Diet => "diet",
            Kind::Preference => "preference",
            Kind::Instruction => "instruction",
            Kind::Project => "project",
            Kind::Context => "context",
            Kind::Other => "other",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Lang {
    En,
    Es,
    Pt,
    Fr,
    De,
}

impl Lang {
    pub(crate) const ALL: [Lang; 5] = [Lang::En, Lang::Es, Lang::Pt, Lang::Fr, Lang::De];

    #[cfg(test)]
    pub(crate) fn code(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::Es => "es",
            Lang::Pt => "pt",
            Lang::Fr => "fr",
            Lang::De => "de",
        }
    }

    /// The language's cues, in the order they are tried.
    pub(crate) fn cues(self) -> &'static [Cue] {
        &CUES[self as usize]
    }

    /// The language's cue file: its name and its text.
    fn cue_file(self) -> (&'static str, &'static str) {
        match self {
            Lang::En => ("cues-en.txt", include_str!("lexicon/cues-en.txt")),
            Lang::Es => ("cues-es.txt", include_str!("lexicon/cues-es.txt")),
            Lang::Pt => ("cues-pt.txt", include_str!("lexicon/cues-pt.txt")),
            Lang::Fr => ("cues-fr.txt", include_str!("lexicon/cues-fr.txt")),
            Lang::De => ("cues-de.txt", include_str!("lexicon/cues-de.txt")),
        }
    }
}

/// How a matched clause becomes the stored statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Out {
    /// English: the clause from the cue on, in the third person.
    Rewrite,
    /// English: the whole clause in the third person (a situation, where the words before
    /// the cue matter: "This week I'm on call").
    Whole,
    /// The template with `{}` replaced by what follows the cue, kept as written.
    Value(&'static str),
    /// This statement, whatever follows the cue.
    Fixed(&'static str),
    /// `The user said: "<clause>"`: the frame is English, the words are the user's.
    Quote,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Cue {
    pub phrase: &'static str,
    pub kind: Kind,
    pub out: Out,
    /// Only counts when the clause contains this (lowercase) substring too.
    pub needs: Option<&'static str>,
}

/// Every language's cues, in [`Lang::ALL`] order.
static CUES: LazyLock<[Vec<Cue>; 5]> = LazyLock::new(|| Lang::ALL.map(|l| loaded(read_cues(l))));

fn read_cues(lang: Lang) -> Result<Vec<Cue>, String> {
    let (file, text) = lang.cue_file();
    Lexicon::parse(file, text)?.entries("cues", cue)
}

/// `phrase | kind | stored` or `phrase | kind | stored | needs` (the file's header says what
/// each field holds).
fn cue(entry: &'static str) -> Result<Cue, String> {
    let (phrase, kind, stored, needs) = match fields(entry)[..] {
        [phrase, kind, stored] => (phrase, kind, stored, None),
        [phrase, kind, stored, needs] => (phrase, kind, stored, Some(needs)),
        ref other => return Err(format!("{} fields, expected 3 or 4", other.len())),
    };
    let kind = Kind::ALL
        .into_iter()
        .find(|k| k.label() == kind)
        .ok_or_else(|| format!("unknown kind {kind:?}"))?;
    let out = match stored {
        "rewrite" => Out::Rewrite,
        "whole" => Out::Whole,
        "quote" => Out::Quote,
        template if template.contains("{}") => {
            if template.matches("{}").count() != 1 {
                return Err("a statement holds `{}` at most once".to_string());
            }
            Out::Value(template)
        }
        statement => Out::Fixed(statement),
    };
    if phrase.is_empty() || phrase != phrase.to_lowercase() {
        return Err("a cue phrase is lowercase and not empty".to_string());
    }
    Ok(Cue {
        phrase,
        kind,
        out,
        needs,
    })
}

/// The word lists of `lexicon/clauses.txt`.
static CLAUSES: LazyLock<Lexicon> = LazyLock::new(|| {
    loaded(Lexicon::parse(
        "clauses.txt",
        include_str!("lexicon/clauses.txt"),
    ))
});

/// A word list of `lexicon/clauses.txt`, by its section name.
pub(crate) fn word_list(section: &str) -> Vec<&'static str> {
    loaded(CLAUSES.section(section).map(<[_]>::to_vec))
}

/// Declares each word list of `lexicon/clauses.txt` as a static read from its section, and
/// `WORD_LISTS`, every one of them by section, for the tests.
macro_rules! word_lists {
    ($($(#[$doc:meta])* $name:ident = $section:literal;)*) => {
        $(
            $(#[$doc])*
            pub(crate) static $name: LazyLock<Vec<&'static str>> =
                LazyLock::new(|| word_list($section));
        )*
        #[cfg(test)]
        pub(crate) static WORD_LISTS: &[(&str, &LazyLock<Vec<&'static str>>)] =
            &[$(($section, &$name)),*];
    };
}

word_lists! {
    /// Openers of a standing instruction to the assistant (after fillers).
    INSTRUCTION_START = "instruction_start";
    /// Words that make any clause without a first-person subject a standing instruction.
    INSTRUCTION_ANYWHERE = "instruction_anywhere";
    /// First-person subjects: a clause holding one is about the user.
    FIRST_PERSON = "first_person";
    /// Polite questions that may carry a standing instruction.
    POLITE_REQUEST = "polite_request";
    /// "please" in every language.
    PLEASE = "please";
    /// After "please", these ask for something now, not forever.
    ONE_OFF_VERBS = "one_off_verbs";
    /// Negations: a cue with one of these before it, in its clause, says the opposite.
    NEGATIONS = "negations";
    /// Conditions and wishes: a cue after one of these is not a fact.
    HYPOTHETICAL = "hypothetical";
    /// Someone other than the user: a cue after one of these is about them.
    THIRD_PARTY = "third_party";
    /// Openers of a new clause after "and", "but" or a comma.
    CLAUSE_OPENERS = "clause_openers";
    /// Conjunctions a compound turn is split at (when a clause opener follows).
    CONJUNCTIONS = "conjunctions";
    /// Greetings, thanks and fillers that open a statement without changing what it says.
    LEAD_FILLERS = "lead_fillers";
    /// Fillers that count only when a comma or a stop follows.
    COMMA_FILLERS = "comma_fillers";
    /// Greetings after which "I'm <Name>" introduces the user.
    GREETINGS = "greetings";
    /// "I'm <Name>" in each language, after a greeting.
    INTRODUCTIONS = "introductions";
    /// "I'm a/an <x>" is a role unless <x> is one of these.
    NOT_A_ROLE = "not_a_role";
    /// "I have a <x>" is not a possession worth keeping for these.
    NOT_OWNED = "not_owned";
    /// "I want <x>" asks for something now when <x> starts with one of these.
    NOT_WANTED = "not_wanted";
    /// What may follow a liking cue without making it a preference worth keeping.
    EMPTY_OBJECT_WORDS = "empty_object_words";
    /// What may follow "I hate" without being a dislike.
    IDIOMS_AFTER_LIKING = "idioms_after_liking";
    /// Health and safety stems (substrings, so inflections match in every language).
    SAFETY_STEMS = "safety_stems";
    /// Words that make an instruction a hard one.
    INTENSIFIERS = "intensifiers";
    /// Words that make a situation urgent.
    URGENT = "urgent";
    /// English openers that tell the assistant what to do.
    EN_IMPERATIVE = "en_imperative";
    /// Articles and prepositions of the other languages: an imperative holding one is not
    /// English.
    NOT_ENGLISH = "not_english";
    /// Abbreviations whose period never ends a sentence.
    ALWAYS_JOINED = "always_joined";
    /// Abbreviations that may end a sentence: split only if the next word is capitalised.
    MAYBE_FINAL = "maybe_final";
}

/// The English names answers may be asked in.
pub(crate) const ENGLISH_LANGUAGE_NAMES: [&str; 5] =
    ["English", "Spanish", "Portuguese", "French", "German"];

/// Languages, as the user may name them in an instruction, to the English name stored.
pub(crate) static LANGUAGES: LazyLock<Vec<(&'static str, &'static str)>> = LazyLock::new(|| {
    loaded(CLAUSES.entries("languages", |entry| {
        let [word, english] = fields_n::<2>(entry)?;
        let english = ENGLISH_LANGUAGE_NAMES
            .into_iter()
            .find(|name| *name == english)
            .ok_or_else(|| format!("{english:?} is not one of the five languages"))?;
        Ok((word, english))
    }))
});

#[cfg(test)]
mod tests {
    use super::*;

    /// Every section of `clauses.txt` is read by one list, and every list has its section.
    #[test]
    fn every_word_list_loads_and_every_section_is_read() {
        let mut read: Vec<&str> = WORD_LISTS.iter().map(|(section, _)| *section).collect();
        read.push("languages");
        for (section, list) in WORD_LISTS {
            assert!(!LazyLock::force(list).is_empty(), "{section}");
        }
        let mut in_file = CLAUSES.section_names();
        in_file.sort_unstable();
        read.sort_unstable();
        assert_eq!(in_file, read);
        // Every one of the five languages can be named.
        for english in ENGLISH_LANGUAGE_NAMES {
            assert!(LANGUAGES.iter().any(|(_, e)| *e == english), "{english}");
        }
    }

    /// Every language's cue file loads, and has cues of every kind.
    #[test]
    fn every_cue_file_loads_and_covers_every_kind() {
        for lang in Lang::ALL {
            let cues = read_cues(lang).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(cues.len(), lang.cues().len());
            for kind in Kind::ALL {
                assert!(
                    cues.iter().any(|c| c.kind == kind),
                    "no {} cue in {}",
                    kind.label(),
                    lang.code()
                );
            }
        }
    }

    #[test]
    fn malformed_cues_are_errors() {
        assert_eq!(
            cue("my name is | name").err(),
            Some("2 fields, expected 3 or 4".to_string())
        );
        assert_eq!(
            cue("my name is | nome | rewrite").err(),
            Some("unknown kind \"nome\"".to_string())
        );
        assert_eq!(
            cue("x | name | The {} and {}").err(),
            Some("a statement holds `{}` at most once".to_string())
        );
        assert_eq!(
            cue("My name | name | rewrite").err(),
            Some("a cue phrase is lowercase and not empty".to_string())
        );
        let c = cue("i have a | allergy | rewrite | allerg").expect("parses");
        assert_eq!(
            (c.phrase, c.kind, c.out),
            ("i have a", Kind::Allergy, Out::Rewrite)
        );
        assert_eq!(c.needs, Some("allerg"));
        let c = cue("soy vegano | diet | The user is vegan").expect("parses");
        assert_eq!(c.out, Out::Fixed("The user is vegan"));
        let c = cue("vivo en | home | The user lives in {}").expect("parses");
        assert_eq!(c.out, Out::Value("The user lives in {}"));
    }
}
