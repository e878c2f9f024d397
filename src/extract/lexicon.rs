//! The extraction lexicons: the phrase tables of the rule extractor ([`super::cues`]) and of
//! the conflict rules ([`super::conflict`]), kept as text files in `lexicon/`, compiled in
//! with `include_str!` and parsed once, on first use.
//!
//! The format: `#` starts a comment line, blank lines are skipped, `[name]` starts a section,
//! and every other line is one entry of the current section, trimmed. An entry's fields are
//! separated by `|` ([`fields`]); a list inside a field by `,` ([`list`]). A field written in
//! double quotes keeps its spaces.
//!
//! Text rather than code, because the tables are most of what a reviewer of the extractor
//! reads and they grow a line at a time: as text they are edited without Rust and a diff shows
//! the words. Parsed at run time rather than turned into code by a build script, so the crate's
//! build has no extra step and the files are the only copy of the tables. Parsed values borrow
//! the compiled-in text, so every phrase is a `&'static str` as a literal would be. The files
//! are part of the program, not input: a malformed one is a bug, which the unit tests of the
//! modules that read them catch by loading every table.

/// One lexicon file: its sections and their entries, in file order.
pub(crate) struct Lexicon {
    file: &'static str,
    sections: Vec<(&'static str, Vec<&'static str>)>,
}

impl Lexicon {
    /// Parses `text`, the contents of `lexicon/<file>` (named in errors).
    pub(crate) fn parse(file: &'static str, text: &'static str) -> Result<Self, String> {
        let mut sections: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                if sections.iter().any(|(n, _)| *n == name) {
                    return Err(format!("{file}:{}: section [{name}] appears twice", i + 1));
                }
                sections.push((name, Vec::new()));
                continue;
            }
            match sections.last_mut() {
                Some((_, entries)) => entries.push(line),
                None => return Err(format!("{file}:{}: an entry before any [section]", i + 1)),
            }
        }
        Ok(Self { file, sections })
    }

    /// The entries of section `name`; an error when the file has no such section or it is
    /// empty.
    pub(crate) fn section(&self, name: &str) -> Result<&[&'static str], String> {
        match self.sections.iter().find(|(n, _)| *n == name) {
            Some((_, entries)) if !entries.is_empty() => Ok(entries),
            Some(_) => Err(format!("{}: section [{name}] is empty", self.file)),
            None => Err(format!("{}: no section [{name}]", self.file)),
        }
    }

    /// Section `name`'s entries, each parsed by `parse`; an error names the entry.
    pub(crate) fn entries<T>(
        &self,
        name: &str,
        parse: impl Fn(&'static str) -> Result<T, String>,
    ) -> Result<Vec<T>, String> {
        self.section(name)?
            .iter()
            .map(|entry| parse(entry).map_err(|e| format!("{} [{name}] `{entry}`: {e}", self.file)))
            .collect()
    }

    /// The names of the file's sections, in file order.
    #[cfg(test)]
    pub(crate) fn section_names(&self) -> Vec<&'static str> {
        self.sections.iter().map(|(n, _)| *n).collect()
    }
}

/// An entry's `|`-separated fields, trimmed; a field in double quotes keeps its spaces.
pub(crate) fn fields(entry: &'static str) -> Vec<&'static str> {
    entry
        .split('|')
        .map(|f| {
            let f = f.trim();
            match f.strip_prefix('"').and_then(|f| f.strip_suffix('"')) {
                Some(quoted) => quoted,
                None => f,
            }
        })
        .collect()
}

/// An entry's fields when there are exactly `N`.
pub(crate) fn fields_n<const N: usize>(entry: &'static str) -> Result<[&'static str; N], String> {
    let fields = fields(entry);
    let found = fields.len();
    fields
        .try_into()
        .map_err(|_| format!("{found} fields, expected {N}"))
}

/// A comma-separated list, each item trimmed; an empty item is an error.
pub(crate) fn list(field: &'static str) -> Result<Vec<&'static str>, String> {
    field
        .split(',')
        .map(|item| {
            let item = item.trim();
            if item.is_empty() {
                Err("an empty item in a list".to_string())
            } else {
                Ok(item)
            }
        })
        .collect()
}

/// A table read from a compiled-in lexicon file. The files are part of the program, so a
/// malformed one is a bug (the unit tests load every table), not an error to recover from.
pub(crate) fn loaded<T>(table: Result<T, String>) -> T {
    table.unwrap_or_else(|e| panic!("malformed extraction lexicon: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_hold_their_entries_trimmed_without_comments() {
        let lex = Lexicon::parse(
            "t.txt",
            "# a comment\n\n[one]\n  first entry  \n# another\nsecond\n[two]\nthird\n",
        )
        .expect("parses");
        assert_eq!(lex.section("one"), Ok(&["first entry", "second"][..]));
        assert_eq!(lex.section("two"), Ok(&["third"][..]));
        assert_eq!(lex.section_names(), vec!["one", "two"]);
        assert_eq!(
            lex.section("three"),
            Err("t.txt: no section [three]".to_string())
        );
    }

    #[test]
    fn malformed_files_are_errors_naming_the_line() {
        assert_eq!(
            Lexicon::parse("t.txt", "# c\nstray\n[one]\nx\n").err(),
            Some("t.txt:2: an entry before any [section]".to_string())
        );
        assert_eq!(
            Lexicon::parse("t.txt", "[one]\nx\n[one]\ny\n").err(),
            Some("t.txt:3: section [one] appears twice".to_string())
        );
        let empty = Lexicon::parse("t.txt", "[one]\n[two]\nx\n").expect("parses");
        assert_eq!(
            empty.section("one"),
            Err("t.txt: section [one] is empty".to_string())
        );
    }

    #[test]
    fn fields_split_on_bars_and_quotes_keep_spaces() {
        assert_eq!(fields("a b | c |d"), vec!["a b", "c", "d"]);
        assert_eq!(fields(r#"" je n'" | " j'""#), vec![" je n'", " j'"]);
        assert_eq!(fields_n::<2>("a | b"), Ok(["a", "b"]));
        assert_eq!(
            fields_n::<3>("a | b"),
            Err("2 fields, expected 3".to_string())
        );
        assert_eq!(list("x, y z ,w"), Ok(vec!["x", "y z", "w"]));
        assert_eq!(list("x,,y"), Err("an empty item in a list".to_string()));
    }

    #[test]
    fn an_entry_that_does_not_parse_is_named() {
        let lex = Lexicon::parse("t.txt", "[pairs]\na | 1\nb | two\n").expect("parses");
        let parsed = lex.entries("pairs", |e| {
            let [k, v] = fields_n::<2>(e)?;
            v.parse::<u32>().map(|v| (k, v)).map_err(|e| e.to_string())
        });
        assert_eq!(
            parsed,
            Err("t.txt [pairs] `b | two`: invalid digit found in string".to_string())
        );
    }
}
