//! The rule extractor's tests: each step's cases in the five languages, and the documented
//! limits.

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
        summary("Vivo en Bilbao y trabajo en Iberdrola. Je m'appelle Léa et j'habite à Nantes."),
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

#[test]
fn each_candidate_names_the_user_messages_that_said_it() {
    let input = ExtractInput::Messages(vec![
        msg("user", "I live in Oslo."),
        msg("assistant", "I live in Paris."),
        msg("user", "I am allergic to peanuts. I live in Oslo."),
    ]);
    let got = RuleExtractor::new()
        .extract_sourced(&input, &|| false)
        .unwrap();
    let summary: Vec<(&str, &[usize])> = got
        .iter()
        .map(|s| (s.candidate.content.as_str(), s.messages.as_slice()))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("The user lives in Oslo", &[0, 2][..]),
            ("The user is allergic to peanuts", &[2][..]),
        ]
    );
    // A text names no message.
    let text = RuleExtractor::new()
        .extract_sourced(&ExtractInput::Text("I live in Oslo.".into()), &|| false)
        .unwrap();
    assert_eq!(text.len(), 1);
    assert!(text[0].messages.is_empty());
}
