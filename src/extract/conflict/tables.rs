//! The conflict rules' phrase tables, read once from `lexicon/conflict.txt` (the file says
//! what each table holds; [`crate::extract::lexicon`] the format).

use std::sync::LazyLock;

use super::{How, Slot};
use crate::extract::lexicon::{fields_n, list, loaded, Lexicon};

static FILE: LazyLock<Lexicon> = LazyLock::new(|| {
    loaded(Lexicon::parse(
        "conflict.txt",
        include_str!("../lexicon/conflict.txt"),
    ))
});

/// A list of words or phrases, one per entry.
fn words(section: &str) -> Vec<&'static str> {
    loaded(FILE.section(section).map(<[_]>::to_vec))
}

/// `name | its names, comma-separated` entries.
fn named(section: &str) -> Vec<(&'static str, Vec<&'static str>)> {
    loaded(FILE.entries(section, |entry| {
        let [name, names] = fields_n::<2>(entry)?;
        Ok((name, list(names)?))
    }))
}

/// The slot a table names.
fn slot(name: &str) -> Result<Slot, String> {
    Ok(match name {
        "name" => Slot::Name,
        "called" => Slot::Called,
        "home" => Slot::Home,
        "employer" => Slot::Employer,
        "role" => Slot::Role,
        "allergy" => Slot::Allergy,
        "regime" => Slot::Regime,
        "diet_rule" => Slot::DietRule,
        // The group is known once the alternative is read (`preference`).
        "preference" => Slot::Pref(""),
        "answer_language" => Slot::AnswerLanguage,
        "project" => Slot::Project,
        other => return Err(format!("unknown slot {other:?}")),
    })
}

fn how(name: &str) -> Result<How, String> {
    Ok(match name {
        "plain" => How::Plain,
        "prefer" => How::Prefer,
        "like" => How::Like,
        "dislike" => How::Dislike,
        "works_as" => How::WorksAs,
        "working_on" => How::WorkingOn,
        "current" => How::Current,
        "country" => How::Country,
        other => return Err(format!("unknown way of stating {other:?}")),
    })
}

/// First-person negations the extractor drops: `(from, to)`, replaced in order.
pub(super) static DROPPED_NEGATIONS: LazyLock<Vec<(&'static str, &'static str)>> =
    LazyLock::new(|| {
        loaded(FILE.entries("dropped_negations", |entry| {
            let [from, to] = fields_n::<2>(entry)?;
            Ok((from, to))
        }))
    });

/// Third-person patterns: the prefix (with the space before the value), its slot and how it
/// states the value.
pub(super) static PATTERNS: LazyLock<Vec<(String, Slot, How)>> = LazyLock::new(|| {
    loaded(FILE.entries("patterns", |entry| {
        let [prefix, s, h] = fields_n::<3>(entry)?;
        Ok((format!("{prefix} "), slot(s)?, how(h)?))
    }))
});

/// Diet statements: the whole statement, its slot and the value it stands for.
pub(super) static DIETS: LazyLock<Vec<(&'static str, Slot, &'static str)>> = LazyLock::new(|| {
    loaded(FILE.entries("diets", |entry| {
        let [statement, s, value] = fields_n::<3>(entry)?;
        Ok((statement, slot(s)?, value))
    }))
});

pub(super) static VALUE_ENDS: LazyLock<Vec<&'static str>> = LazyLock::new(|| words("value_ends"));
pub(super) static LEADING: LazyLock<Vec<&'static str>> = LazyLock::new(|| words("leading"));
pub(super) static VAGUE: LazyLock<Vec<&'static str>> = LazyLock::new(|| words("vague"));
pub(super) static COMPANY_SUFFIXES: LazyLock<Vec<&'static str>> =
    LazyLock::new(|| words("company_suffixes"));
pub(super) static EXONYMS: LazyLock<Vec<(&'static str, Vec<&'static str>)>> =
    LazyLock::new(|| named("exonyms"));
pub(super) static COUNTRIES: LazyLock<Vec<(&'static str, Vec<&'static str>)>> =
    LazyLock::new(|| named("countries"));
pub(super) static REGIONS: LazyLock<Vec<&'static str>> = LazyLock::new(|| words("regions"));
pub(super) static ALLERGENS: LazyLock<Vec<(&'static str, Vec<&'static str>)>> =
    LazyLock::new(|| named("allergens"));
pub(super) static ANSWER_WORDS: LazyLock<Vec<&'static str>> =
    LazyLock::new(|| words("answer_words"));
pub(super) static ANSWER_PHRASES: LazyLock<Vec<&'static str>> =
    LazyLock::new(|| words("answer_phrases"));

/// A group of alternatives one prefers one of.
#[derive(Debug)]
pub(super) struct Group {
    pub name: &'static str,
    /// What must also be said for the alternatives to be about this group (none: nothing).
    pub needs: Vec<&'static str>,
    /// The alternatives with their words in the five languages, in the order they are tried.
    pub alternatives: Vec<(&'static str, Vec<&'static str>)>,
}

pub(super) static GROUPS: LazyLock<Vec<Group>> = LazyLock::new(|| loaded(groups()));

fn groups() -> Result<Vec<Group>, String> {
    let mut groups: Vec<Group> = Vec::new();
    for (name, alternative, names) in FILE.entries("preference_groups", |entry| {
        let [group, alternative, names] = fields_n::<3>(entry)?;
        Ok((group, alternative, list(names)?))
    })? {
        match groups.iter_mut().find(|g| g.name == name) {
            Some(group) => group.alternatives.push((alternative, names)),
            None => groups.push(Group {
                name,
                needs: Vec::new(),
                alternatives: vec![(alternative, names)],
            }),
        }
    }
    for (name, needs) in FILE.entries("preference_subjects", |entry| {
        let [group, needs] = fields_n::<2>(entry)?;
        Ok((group, list(needs)?))
    })? {
        let group = groups
            .iter_mut()
            .find(|g| g.name == name)
            .ok_or_else(|| format!("conflict.txt [preference_subjects]: no group {name:?}"))?;
        group.needs = needs;
    }
    Ok(groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every table loads, none is empty, and every section of the file is one of them.
    #[test]
    fn every_table_loads_and_every_section_is_read() {
        assert!(!DROPPED_NEGATIONS.is_empty());
        assert!(!PATTERNS.is_empty());
        assert!(!DIETS.is_empty());
        for list in [
            &VALUE_ENDS,
            &LEADING,
            &VAGUE,
            &COMPANY_SUFFIXES,
            &REGIONS,
            &ANSWER_WORDS,
            &ANSWER_PHRASES,
        ] {
            assert!(!list.is_empty());
        }
        for named in [&EXONYMS, &COUNTRIES, &ALLERGENS] {
            assert!(named.iter().all(|(_, names)| !names.is_empty()));
        }
        let mut sections = FILE.section_names();
        sections.sort_unstable();
        assert_eq!(
            sections,
            [
                "allergens",
                "answer_phrases",
                "answer_words",
                "company_suffixes",
                "countries",
                "diets",
                "dropped_negations",
                "exonyms",
                "leading",
                "patterns",
                "preference_groups",
                "preference_subjects",
                "regions",
                "vague",
                "value_ends",
            ]
        );
    }

    /// What the rules expect of the tables: every slot that has a value reader is stated by a
    /// pattern, each group offers a choice, the patterns are folded as the statement they are
    /// matched on, and a pattern that starts another comes after it.
    #[test]
    fn the_tables_cover_what_the_rules_read() {
        for expected in [
            Slot::Name,
            Slot::Called,
            Slot::Home,
            Slot::Employer,
            Slot::Role,
            Slot::Allergy,
            Slot::DietRule,
            Slot::Pref(""),
            Slot::Project,
        ] {
            assert!(
                PATTERNS.iter().any(|(_, s, _)| *s == expected),
                "no pattern states {expected:?}"
            );
        }
        assert!(DIETS.iter().any(|(_, s, _)| *s == Slot::Regime));
        for (prefix, _, _) in PATTERNS.iter() {
            assert_eq!(*prefix, super::super::fold(prefix), "{prefix}");
        }
        for (i, (a, _, _)) in PATTERNS.iter().enumerate() {
            for (b, _, _) in &PATTERNS[i + 1..] {
                assert!(!b.starts_with(a.as_str()), "{b:?} comes after {a:?}");
            }
        }
        let groups = groups().expect("groups");
        assert!(groups.iter().all(|g| g.alternatives.len() >= 2));
        assert!(groups.iter().any(|g| !g.needs.is_empty()));
    }

    #[test]
    fn unknown_names_are_errors() {
        assert_eq!(slot("nombre"), Err("unknown slot \"nombre\"".to_string()));
        assert_eq!(
            how("maybe").map(|_| ()),
            Err("unknown way of stating \"maybe\"".to_string())
        );
    }
}
