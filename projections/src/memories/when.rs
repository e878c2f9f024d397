//! The time a search's query names ("in May 2023", "on 8 May, 2023", "May 3, 2023", "in
//! 2022", "in June"; and relative to when the question is asked: "yesterday", "last week",
//! "two months ago", "last year"), read as a [`Period`] that memories' `occurred_at` is
//! matched against, and the boost a hybrid search gives the memories whose `occurred_at` falls
//! in it.
//!
//! A relative time is resolved against the reference time the caller gives: the time of the
//! position a search is `as_of`, else now (in UTC; a week runs Monday to Sunday). A memory
//! without `occurred_at` is never in a period, so a tenant that gives none gets exactly the
//! ranking it had.

use chrono::{Datelike, Days, Months, NaiveDate};
use uuid::Uuid;

/// How long after a period a memory still counts as in it: a conversation turn is dated when it
/// was said, often days after what it tells ("I went camping last week"). On LoCoMo's
/// development half 0 to 14 days score within 0.3 points (docs/SEARCH.md, "When it happened").
pub const AFTER_SLACK_DAYS: i64 = 7;

/// The weight of the in-period ranking fused with a hybrid search's two lists, at the fusion's
/// `k`: on LoCoMo's development half 0.5 and 1 lift less, 2 to 10 the same (docs/SEARCH.md).
pub const TIME_WEIGHT: f32 = 2.0;

/// A span of time a query names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Period {
    /// One day.
    Day(NaiveDate),
    /// A month of a year (the first day of it).
    Month(NaiveDate),
    /// A calendar year.
    Year(i32),
    /// A month named without its year: that month of any year (1-12).
    MonthOfAnyYear(u32),
    /// A week, Monday to Sunday (its Monday).
    Week(NaiveDate),
}

const MONTHS: [&str; 12] = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];

/// Words after which a bare month or year names a time ("in June", "during 2022"), so that
/// "may" the verb and a number that is not a year are not read as one.
const LEADS: [&str; 10] = [
    "in", "during", "of", "since", "until", "before", "after", "early", "late", "mid",
];

fn month(w: &str) -> Option<u32> {
    MONTHS.iter().position(|m| *m == w).map(|i| i as u32 + 1)
}

fn number(w: &str) -> Option<u32> {
    let digits = w.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let suffix = &w[digits.len()..];
    if digits.is_empty() || !matches!(suffix, "" | "st" | "nd" | "rd" | "th") {
        return None;
    }
    digits.parse().ok()
}

fn day(w: &str) -> Option<u32> {
    number(w).filter(|d| (1..=31).contains(d))
}

fn year(w: &str) -> Option<i32> {
    (w.len() == 4)
        .then(|| w.parse::<i32>().ok())
        .flatten()
        .filter(|y| (1900..=2199).contains(y))
}

/// The first absolute time `query` names, if it names one (a relative one is not read).
pub fn named_period(query: &str) -> Option<Period> {
    named_period_at(query, None)
}

/// Small counts written as words ("two months ago").
const COUNTS: [&str; 12] = [
    "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
    "twelve",
];

/// A count before a unit of time: digits, a word, or "a"/"an" ("a week ago").
fn count(w: &str) -> Option<u32> {
    match w {
        "a" | "an" => Some(1),
        _ => COUNTS
            .iter()
            .position(|c| *c == w)
            .map(|i| i as u32 + 1)
            .or_else(|| w.parse().ok().filter(|n| (1..=100).contains(n))),
    }
}

/// The Monday of the week holding `d`.
fn monday(d: NaiveDate) -> Option<NaiveDate> {
    d.checked_sub_days(Days::new(u64::from(d.weekday().num_days_from_monday())))
}

/// The period `n` `unit`s (day, week, month, year, singular or plural) before `today`: the day,
/// the week, the calendar month or the calendar year holding that moment.
fn before(today: NaiveDate, n: u32, unit: &str) -> Option<Period> {
    match unit.strip_suffix('s').unwrap_or(unit) {
        "day" => today.checked_sub_days(Days::new(n.into())).map(Period::Day),
        "week" => today
            .checked_sub_days(Days::new(7 * u64::from(n)))
            .and_then(monday)
            .map(Period::Week),
        "month" => today
            .with_day(1)
            .and_then(|first| first.checked_sub_months(Months::new(n)))
            .map(Period::Month),
        "year" => Some(Period::Year(today.year() - n as i32)),
        _ => None,
    }
}

/// The relative time at words `i..` of a query asked at `today`: "today", "yesterday", "the
/// day before yesterday", "last/this week|month|year", "N days|weeks|months|years ago".
fn relative(words: &[String], i: usize, today: NaiveDate) -> Option<Period> {
    let at = |i: usize| words.get(i).map(String::as_str).unwrap_or("");
    match (at(i), at(i + 1)) {
        ("today", _) => return Some(Period::Day(today)),
        // "the day before yesterday", read at its last word.
        ("yesterday", _) if i >= 2 && at(i - 1) == "before" && at(i - 2) == "day" => {
            return before(today, 2, "day")
        }
        ("yesterday", _) => return before(today, 1, "day"),
        ("last", unit) | ("past", unit) if matches!(unit, "week" | "month" | "year") => {
            return before(today, 1, unit)
        }
        ("this", unit) if matches!(unit, "week" | "month" | "year") => {
            return before(today, 0, unit)
        }
        _ => {}
    }
    let n = count(at(i))?;
    (at(i + 2) == "ago")
        .then(|| before(today, n, at(i + 1)))
        .flatten()
}

/// The first time `query` names, if it names one; a relative time only when `now` (µs) says
/// when the question is asked.
pub fn named_period_at(query: &str, now: Option<i64>) -> Option<Period> {
    let today = now
        .and_then(chrono::DateTime::from_timestamp_micros)
        .map(|t| t.date_naive());
    let words: Vec<String> = query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    let at = |i: usize| words.get(i).map(String::as_str).unwrap_or("");
    let led = |i: usize| i > 0 && LEADS.contains(&at(i - 1));
    for i in 0..words.len() {
        let w = at(i);
        if let Some(p) = today.and_then(|today| relative(&words, i, today)) {
            return Some(p);
        }
        if let Some(m) = month(w) {
            // "May 3, 2023", "May 2023", "in June".
            if let (Some(d), Some(y)) = (day(at(i + 1)), year(at(i + 2))) {
                if let Some(date) = NaiveDate::from_ymd_opt(y, m, d) {
                    return Some(Period::Day(date));
                }
            }
            if let Some(y) = year(at(i + 1)) {
                if let Some(first) = NaiveDate::from_ymd_opt(y, m, 1) {
                    return Some(Period::Month(first));
                }
            }
            if led(i) || (w != "may" && day(at(i + 1)).is_some()) {
                return Some(Period::MonthOfAnyYear(m));
            }
        } else if let Some(d) = day(w) {
            // "8 May, 2023".
            if let (Some(m), Some(y)) = (month(at(i + 1)), year(at(i + 2))) {
                if let Some(date) = NaiveDate::from_ymd_opt(y, m, d) {
                    return Some(Period::Day(date));
                }
            }
        } else if let Some(y) = year(w) {
            if led(i) {
                return Some(Period::Year(y));
            }
        }
    }
    None
}

const DAY_MICROS: i64 = 86_400_000_000;

fn micros(d: NaiveDate) -> i64 {
    d.and_hms_opt(0, 0, 0)
        .map_or(0, |t| t.and_utc().timestamp_micros())
}

/// `[start, end)` of a month, in µs.
fn month_span(y: i32, m: u32) -> Option<(i64, i64)> {
    let first = NaiveDate::from_ymd_opt(y, m, 1)?;
    let next = if m == 12 {
        NaiveDate::from_ymd_opt(y + 1, 1, 1)?
    } else {
        NaiveDate::from_ymd_opt(y, m + 1, 1)?
    };
    Some((micros(first), micros(next)))
}

impl Period {
    /// Whether a memory that occurred at `t` (µs) is in the period, or up to
    /// [`AFTER_SLACK_DAYS`] after it.
    pub fn holds(&self, t: i64) -> bool {
        self.holds_with(t, AFTER_SLACK_DAYS * DAY_MICROS)
    }

    fn holds_with(&self, t: i64, slack: i64) -> bool {
        let within = |span: Option<(i64, i64)>| {
            span.is_some_and(|(start, end)| start <= t && t < end.saturating_add(slack))
        };
        match *self {
            Period::Day(d) => within(Some((micros(d), micros(d) + DAY_MICROS))),
            Period::Week(monday) => within(Some((micros(monday), micros(monday) + 7 * DAY_MICROS))),
            Period::Month(first) => within(month_span(first.year(), first.month())),
            Period::Year(y) => within(
                NaiveDate::from_ymd_opt(y, 1, 1)
                    .zip(NaiveDate::from_ymd_opt(y + 1, 1, 1))
                    .map(|(a, b)| (micros(a), micros(b))),
            ),
            Period::MonthOfAnyYear(m) => {
                let Some(y) = chrono::DateTime::from_timestamp_micros(t).map(|d| d.year()) else {
                    return false;
                };
                // The slack may reach into the next year (December's).
                within(month_span(y, m)) || within(month_span(y - 1, m))
            }
        }
    }
}

/// `ranked` (fused scores, best first) with the memories `in_period` says are in the period
/// fused in as a third ranking: the `i`-th of them (in `ranked`'s order, from 1) gains
/// `weight / (k + i)`. Ties keep `ranked`'s order.
pub fn boost(ranked: &mut [(Uuid, f32)], in_period: impl Fn(&Uuid) -> bool, k: f32, weight: f32) {
    let mut i = 0;
    for (id, score) in ranked.iter_mut() {
        if in_period(id) {
            i += 1;
            *score += weight / (k + i as f32);
        }
    }
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn date(y: i32, m: u32, d: u32) -> NaiveDate {
        NaiveDate::from_ymd_opt(y, m, d).expect("a date")
    }

    #[test]
    fn the_times_a_question_names() {
        let p = named_period;
        assert_eq!(
            p("Who did Maria have dinner with on May 3, 2023?"),
            Some(Period::Day(date(2023, 5, 3)))
        );
        assert_eq!(
            p("What movie did Joanna watch on 1 May, 2022?"),
            Some(Period::Day(date(2022, 5, 1)))
        );
        assert_eq!(
            p("What did John attend with his colleagues in March 2023?"),
            Some(Period::Month(date(2023, 3, 1)))
        );
        assert_eq!(
            p("When did Melanie go camping in June?"),
            Some(Period::MonthOfAnyYear(6))
        );
        assert_eq!(p("Where did she live in 2019?"), Some(Period::Year(2019)));
        assert_eq!(
            p("Which tournament did Nate win in the beginning of November 2022?"),
            Some(Period::Month(date(2022, 11, 1)))
        );
        // "may" the verb, a number that is no year, a relative time: nothing.
        assert_eq!(p("May I ask what she said about 2000 cats?"), None);
        assert_eq!(p("What did she do last year?"), None);
        assert_eq!(p("When did Caroline go to the support group?"), None);
    }

    #[test]
    fn relative_times_are_read_against_the_time_asked() {
        // Wednesday 2023-05-10, 15:00 UTC.
        let asked = micros(date(2023, 5, 10)) + 15 * 3_600_000_000;
        let p = |q: &str| named_period_at(q, Some(asked));
        assert_eq!(
            p("What did I eat today?"),
            Some(Period::Day(date(2023, 5, 10)))
        );
        assert_eq!(
            p("Where did Caroline go yesterday?"),
            Some(Period::Day(date(2023, 5, 9)))
        );
        assert_eq!(
            p("What happened the day before yesterday?"),
            Some(Period::Day(date(2023, 5, 8)))
        );
        assert_eq!(
            p("What did Melanie paint last week?"),
            Some(Period::Week(date(2023, 5, 1)))
        );
        assert_eq!(
            p("Anything new this week?"),
            Some(Period::Week(date(2023, 5, 8)))
        );
        assert_eq!(
            p("Which book did she read last month?"),
            Some(Period::Month(date(2023, 4, 1)))
        );
        assert_eq!(
            p("What did she start this month?"),
            Some(Period::Month(date(2023, 5, 1)))
        );
        assert_eq!(p("What did she do last year?"), Some(Period::Year(2022)));
        assert_eq!(p("this year"), Some(Period::Year(2023)));
        assert_eq!(
            p("What did John buy two months ago?"),
            Some(Period::Month(date(2023, 3, 1)))
        );
        assert_eq!(
            p("Who called 3 days ago?"),
            Some(Period::Day(date(2023, 5, 7)))
        );
        assert_eq!(
            p("Where was he a week ago?"),
            Some(Period::Week(date(2023, 5, 1)))
        );
        assert_eq!(
            p("What changed two weeks ago?"),
            Some(Period::Week(date(2023, 4, 24)))
        );
        assert_eq!(
            p("Where did she live five years ago?"),
            Some(Period::Year(2018))
        );
        // Across a year's turn: January asked, "last month" is December of the year before.
        let january = micros(date(2024, 1, 3));
        assert_eq!(
            named_period_at("last month", Some(january)),
            Some(Period::Month(date(2023, 12, 1)))
        );
        // The first time named wins, relative or absolute.
        assert_eq!(
            p("What did she do in March 2021 and last week?"),
            Some(Period::Month(date(2021, 3, 1)))
        );
        assert_eq!(
            p("What did she do last week, and in March 2021?"),
            Some(Period::Week(date(2023, 5, 1)))
        );
        // Not times: a count with no unit or no "ago", "last" of something else.
        assert_eq!(p("I have two cats"), None);
        assert_eq!(p("two weeks of holiday"), None);
        assert_eq!(p("What was the last book she read?"), None);
        // Without the time asked, only absolute times are read.
        assert_eq!(named_period_at("last year", None), None);
        assert_eq!(
            named_period_at("in March 2021", None),
            Some(Period::Month(date(2021, 3, 1)))
        );
    }

    #[test]
    fn a_week_holds_monday_to_sunday_and_the_slack_after_it() {
        let at = |y, m, d| micros(date(y, m, d)) + 3_600_000_000;
        let week = Period::Week(date(2023, 5, 1));
        assert!(week.holds(at(2023, 5, 1)));
        assert!(week.holds(at(2023, 5, 7)));
        assert!(!week.holds(at(2023, 4, 30)));
        assert!(!week.holds_with(at(2023, 5, 8), 0));
        assert!(week.holds(at(2023, 5, 14)));
        assert!(!week.holds(at(2023, 5, 15)));
    }

    #[test]
    fn a_period_holds_its_span_and_the_slack_after_it() {
        let at = |y, m, d| micros(date(y, m, d)) + 3_600_000_000;
        let march = Period::Month(date(2023, 3, 1));
        assert!(march.holds(at(2023, 3, 1)));
        assert!(march.holds(at(2023, 3, 31)));
        assert!(march.holds(at(2023, 4, 7)));
        assert!(!march.holds(at(2023, 4, 8)));
        assert!(!march.holds(at(2023, 2, 28)));
        let day = Period::Day(date(2023, 5, 3));
        assert!(day.holds(at(2023, 5, 3)));
        assert!(!day.holds_with(at(2023, 5, 4), 0));
        assert!(!day.holds(at(2023, 5, 2)));
        let june = Period::MonthOfAnyYear(6);
        assert!(june.holds(at(2021, 6, 30)));
        assert!(june.holds(at(2024, 6, 1)));
        assert!(!june.holds(at(2024, 5, 31)));
        let december = Period::MonthOfAnyYear(12);
        assert!(december.holds(at(2024, 1, 5)));
        assert!(!december.holds(at(2024, 1, 9)));
        assert!(Period::Year(2022).holds(at(2022, 12, 31)));
        assert!(!Period::Year(2022).holds(at(2021, 12, 31)));
    }

    #[test]
    fn the_boost_lifts_what_is_in_the_period_keeping_the_rest_in_order() {
        let ids: Vec<Uuid> = (1..=4).map(Uuid::from_u128).collect();
        let mut ranked: Vec<(Uuid, f32)> = ids
            .iter()
            .zip([0.5, 0.4, 0.3, 0.2])
            .map(|(i, s)| (*i, s))
            .collect();
        boost(&mut ranked, |id| *id == ids[3], 2.0, 1.0);
        let order: Vec<Uuid> = ranked.iter().map(|r| r.0).collect();
        assert_eq!(order, [ids[3], ids[0], ids[1], ids[2]]);
        let mut none = vec![(ids[0], 0.5), (ids[1], 0.4)];
        boost(&mut none, |_| false, 2.0, 1.0);
        assert_eq!(none, [(ids[0], 0.5), (ids[1], 0.4)]);
    }
}
