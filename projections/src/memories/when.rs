//! The time a search's query names ("in May 2023", "on 8 May, 2023", "May 3, 2023", "in
//! 2022", "in June"), read as a [`Period`] that memories' `occurred_at` is matched against, and
//! the boost a hybrid search gives the memories whose `occurred_at` falls in it.
//!
//! Only absolute times are read: a relative one ("last year", "two weeks ago") needs the time
//! the question is asked about, which a query does not carry. A memory without `occurred_at`
//! is never in a period, so a tenant that gives none gets exactly the ranking it had.

use chrono::{Datelike, NaiveDate};
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

/// The first time `query` names, if it names one.
pub fn named_period(query: &str) -> Option<Period> {
    let words: Vec<String> = query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    let at = |i: usize| words.get(i).map(String::as_str).unwrap_or("");
    let led = |i: usize| i > 0 && LEADS.contains(&at(i - 1));
    for i in 0..words.len() {
        let w = at(i);
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
