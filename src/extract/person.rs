//! English first person to third person: "I live in Lisbon" becomes "The user lives in
//! Lisbon". The first reference to the speaker is "the user" and later ones are pronouns
//! ("I prefer my coffee black" -> "The user prefers their coffee black"), the way a person
//! would restate it; "you" is the assistant. Word by word, no parser: it only has to be right
//! for the statements the rule extractor keeps.

/// How the speaker has been named so far in the sentence being rewritten.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Named {
    /// Not yet: the next "I" or "my" becomes "the user" / "the user's".
    No,
    /// Already: the next one becomes "they" / "their".
    Yes,
}

/// `clause` in the third person, its first letter capitalised and its final punctuation
/// dropped, so that every stored statement reads the same way.
pub(crate) fn third_person(clause: &str, named: Named) -> String {
    let words: Vec<&str> = clause.split_whitespace().collect();
    let mut out: Vec<String> = Vec::with_capacity(words.len() + 2);
    let mut named = named;
    let mut i = 0;
    while i < words.len() {
        let (core, tail) = split_punct(words[i]);
        let lower = core.to_lowercase().replace(['\u{2019}', '\u{2018}'], "'");
        let subject = |named: Named| match named {
            Named::No => "the user",
            Named::Yes => "they",
        };
        let replaced: Option<String> = match lower.as_str() {
            "i" | "i'm" | "i've" | "i'd" | "i'll" => {
                let who = subject(named);
                let they = named == Named::Yes;
                named = Named::Yes;
                let rest = match lower.as_str() {
                    "i'm" => Some(if they { "are" } else { "is" }.to_string()),
                    "i've" => Some(if they { "have" } else { "has" }.to_string()),
                    "i'd" => Some("would".to_string()),
                    "i'll" => Some("will".to_string()),
                    _ => None,
                };
                match rest {
                    Some(verb) => Some(format!("{who} {verb}{tail}")),
                    None if tail.is_empty() => {
                        // "I" then any adverbs, then the verb to conjugate.
                        let mut phrase = vec![who.to_string()];
                        let mut j = i + 1;
                        while j < words.len() && ADVERBS.contains(&fold(words[j]).as_str()) {
                            phrase.push(words[j].to_string());
                            j += 1;
                        }
                        if let Some(verb) = words.get(j) {
                            let (vcore, vtail) = split_punct(verb);
                            phrase.push(format!("{}{vtail}", conjugate(vcore, they)));
                            j += 1;
                        }
                        i = j;
                        out.push(phrase.join(" "));
                        continue;
                    }
                    None => Some(format!("{who}{tail}")),
                }
            }
            "me" | "myself" => {
                let w = match (named, lower.as_str()) {
                    (Named::No, _) => "the user",
                    (Named::Yes, "me") => "them",
                    (Named::Yes, _) => "themselves",
                };
                named = Named::Yes;
                Some(format!("{w}{tail}"))
            }
            "my" | "mine" => {
                let w = match (named, lower.as_str()) {
                    (Named::No, _) => "the user's",
                    (Named::Yes, "my") => "their",
                    (Named::Yes, _) => "theirs",
                };
                named = Named::Yes;
                Some(format!("{w}{tail}"))
            }
            // "We" is the user with the people they work or live with; a plural subject
            // takes the verb as it is.
            "we" | "we're" | "we've" | "our" => {
                let w = match (named, lower.as_str()) {
                    (_, "we") => "the user and their team",
                    (_, "we're") => "the user and their team are",
                    (_, "we've") => "the user and their team have",
                    (Named::No, _) => "the user's",
                    (Named::Yes, _) => "their",
                };
                named = Named::Yes;
                Some(format!("{w}{tail}"))
            }
            "us" => Some(format!("the user and their team{tail}")),
            "you" => Some(format!("the assistant{tail}")),
            "your" => Some(format!("the assistant's{tail}")),
            "you're" => Some(format!("the assistant is{tail}")),
            _ => None,
        };
        out.push(replaced.unwrap_or_else(|| words[i].to_string()));
        i += 1;
    }
    finish(&out.join(" "))
}

/// Capitalises the first letter and drops final punctuation (`.`, `!`, `?`, `;`, `,`, `…`).
pub(crate) fn finish(s: &str) -> String {
    let s = s
        .trim()
        .trim_end_matches(['.', '!', '?', ';', ',', '…', ':'])
        .trim_end();
    let mut chars = s.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// Words that may stand between "I" and its verb.
const ADVERBS: &[&str] = &[
    "always",
    "never",
    "also",
    "really",
    "usually",
    "often",
    "just",
    "still",
    "currently",
    "mostly",
    "sometimes",
    "only",
    "actually",
    "now",
    "recently",
    "generally",
    "normally",
    "mainly",
    "strongly",
    "definitely",
    "absolutely",
    "totally",
    "truly",
    "rarely",
    "seldom",
];

/// Verbs that look the same after "he" as after "I": modals and the past tense.
const UNCHANGED: &[&str] = &[
    "can",
    "could",
    "will",
    "would",
    "shall",
    "should",
    "may",
    "might",
    "must",
    "can't",
    "cannot",
    "couldn't",
    "won't",
    "wouldn't",
    "shouldn't",
    "didn't",
    "wasn't",
    "was",
    "used",
    "grew",
    "went",
    "got",
    "had",
    "made",
    "took",
    "came",
    "became",
    "began",
    "bought",
    "brought",
    "built",
    "caught",
    "chose",
    "did",
    "drove",
    "ate",
    "fell",
    "felt",
    "found",
    "flew",
    "forgot",
    "gave",
    "knew",
    "left",
    "lost",
    "met",
    "paid",
    "put",
    "quit",
    "ran",
    "said",
    "saw",
    "sold",
    "sent",
    "set",
    "spent",
    "spoke",
    "stood",
    "taught",
    "thought",
    "told",
    "understood",
    "won",
    "wrote",
];

fn fold(w: &str) -> String {
    split_punct(w)
        .0
        .to_lowercase()
        .replace(['\u{2019}', '\u{2018}'], "'")
}

/// The verb that follows "I" as it follows "the user" (`they` false) or "they".
fn conjugate(verb: &str, they: bool) -> String {
    let lower = fold(verb);
    if they {
        return match lower.as_str() {
            "am" => "are".into(),
            "was" => "were".into(),
            _ => verb.to_string(),
        };
    }
    let irregular = match lower.as_str() {
        "am" => Some("is"),
        "have" => Some("has"),
        "do" => Some("does"),
        "go" => Some("goes"),
        "don't" => Some("doesn't"),
        "haven't" => Some("hasn't"),
        "'m" => Some("is"),
        _ => None,
    };
    if let Some(v) = irregular {
        return v.to_string();
    }
    if UNCHANGED.contains(&lower.as_str())
        || lower.ends_with("ed")
        || !lower.chars().all(|c| c.is_alphabetic())
    {
        return verb.to_string();
    }
    if ["s", "sh", "ch", "x", "z", "o"]
        .iter()
        .any(|e| lower.ends_with(e))
    {
        return format!("{verb}es");
    }
    let mut rev = lower.chars().rev();
    if rev.next() == Some('y') && rev.next().is_some_and(|c| !"aeiou".contains(c)) {
        return format!("{}ies", &verb[..verb.len() - 1]);
    }
    format!("{verb}s")
}

/// A word without its trailing punctuation, and that punctuation.
fn split_punct(w: &str) -> (&str, &str) {
    let core = w.trim_end_matches(|c: char| !c.is_alphanumeric() && c != '\'' && c != '’');
    (core, &w[core.len()..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_person_becomes_the_user_then_they() {
        for (said, stored) in [
            ("I live in Lisbon.", "The user lives in Lisbon"),
            ("My name is Dana", "The user's name is Dana"),
            (
                "I prefer my coffee black",
                "The user prefers their coffee black",
            ),
            ("I'm a nurse", "The user is a nurse"),
            (
                "I’m allergic to shellfish",
                "The user is allergic to shellfish",
            ),
            ("I always watch films", "The user always watches films"),
            ("I was born in 1984", "The user was born in 1984"),
            ("I grew up in Ohio", "The user grew up in Ohio"),
            ("I study law", "The user studies law"),
            ("I have a dog", "The user has a dog"),
            ("I don't eat pork", "The user doesn't eat pork"),
            (
                "I'd rather you didn't summarise my emails",
                "The user would rather the assistant didn't summarise their emails",
            ),
            (
                "We use Kubernetes",
                "The user and their team use Kubernetes",
            ),
            (
                "we're migrating to Postgres",
                "The user and their team are migrating to Postgres",
            ),
            (
                "I've got two cats and I am happy",
                "The user has got two cats and they are happy",
            ),
            ("I play, I think", "The user plays, they think"),
        ] {
            assert_eq!(third_person(said, Named::No), stored, "{said:?}");
        }
        assert_eq!(
            third_person("give me recipes with my ingredients", Named::Yes),
            "Give them recipes with their ingredients"
        );
    }
}
