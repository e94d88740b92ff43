//! Maintenance windows: when the controller may roll a workload
//! (docs/behaviour.md, "Maintenance windows"). `<domain>/roll-window` reads
//! `<days> <HH:MM>-<HH:MM> <IANA zone>`, several joined by `;`. Tenants write
//! it, so it is bounded and never echoed at length, and a text that does not
//! parse never opens: a typo must hold a roll, not let it through at noon.
//!
//! Every window is a set of intervals of instants, one per local day its days
//! name, from the start on that day to the end on that day (or the next day,
//! when the end is before the start). A local time that a DST gap skips
//! resolves to the first instant after the gap; one a fold repeats, to its
//! first occurrence. The clock is an argument: nothing here reads it.

use std::fmt;
use std::time::SystemTime;

use jiff::civil::{Date, DateTime, Time, Weekday};
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::{SignedDuration, Timestamp};

use super::model::warnings::shorten_middle;

/// Bytes in a `roll-window` text at most.
pub const MAX_BYTES: usize = 1024;
/// Windows in one text at most.
pub const MAX_WINDOWS: usize = 16;
/// Characters of a tenant's token an error quotes at most.
const MAX_ECHO: usize = 40;
/// Local days searched after an instant for an opening: a week, and a week
/// more for a weekly window whose one occurrence fell wholly into a DST gap.
const SEARCH_DAYS: usize = 15;
/// Local days searched before an instant: an overnight window started the day
/// before, and a transition at midnight can shift that by one more.
const DAYS_BEFORE: usize = 2;
/// A stretch open this long has no closing worth naming: the windows cover
/// every day of the week.
const OPEN_FOR_GOOD: SignedDuration = SignedDuration::from_hours(8 * 24);

const DAY_NAMES: [(&str, Weekday); 7] = [
    ("Mon", Weekday::Monday),
    ("Tue", Weekday::Tuesday),
    ("Wed", Weekday::Wednesday),
    ("Thu", Weekday::Thursday),
    ("Fri", Weekday::Friday),
    ("Sat", Weekday::Saturday),
    ("Sun", Weekday::Sunday),
];

/// The maintenance windows of one `roll-window` text; open when any is.
#[derive(Clone, Debug)]
pub struct RollWindows {
    windows: Vec<RollWindow>,
}

/// One `<days> <HH:MM>-<HH:MM> <zone>`.
#[derive(Clone, Debug)]
struct RollWindow {
    days: Days,
    start: Time,
    end: Time,
    zone: TimeZone,
}

/// The weekdays a window starts on, a bit each from Monday.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Days(u8);

/// Why a `roll-window` text was refused; its Display is the reason an Event
/// and `configsum explain` show.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidRollWindow {
    #[error("roll window is {bytes} bytes, more than the {MAX_BYTES} allowed")]
    TooLong { bytes: usize },
    #[error("roll window has more than {MAX_WINDOWS} windows")]
    TooMany,
    #[error("roll window is empty")]
    Empty,
    #[error("window {window}: {problem}")]
    Window { window: usize, problem: Problem },
}

/// What is wrong with one window. A quoted token is shortened to
/// [`MAX_ECHO`] characters, its control characters escaped.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error("nothing between `;`")]
    Empty,
    #[error("expected `<days> <HH:MM>-<HH:MM> <zone>`, found {found} fields")]
    Fields { found: usize },
    #[error("unknown day {token} (days are Mon Tue Wed Thu Fri Sat Sun, or *)")]
    Day { token: String },
    #[error("day range {token} starts and ends on the same day")]
    DayRange { token: String },
    #[error("`*` means every day and stands alone")]
    Star,
    #[error("times {token} are not HH:MM-HH:MM (HH 00-23, MM 00-59)")]
    Times { token: String },
    #[error("times {token} start where they end: a zero-length or 24-hour window is ambiguous")]
    SameStartEnd { token: String },
    #[error("unknown time zone {token} (an IANA name such as Europe/Berlin or UTC)")]
    Zone { token: String },
}

/// The text that applies to a workload: its own annotation, else its
/// namespace's, else the `--roll-window` flag. The first present one wins
/// even when it does not parse (fail closed: a broken workload annotation
/// does not fall back to a laxer namespace window).
pub fn effective<'a>(
    workload: Option<&'a str>,
    namespace: Option<&'a str>,
    flag: Option<&'a str>,
) -> Option<&'a str> {
    workload.or(namespace).or(flag)
}

impl RollWindows {
    /// Parses a `roll-window` text; an error says what is wrong, in bounded words.
    pub fn parse(text: &str) -> Result<RollWindows, InvalidRollWindow> {
        if text.len() > MAX_BYTES {
            return Err(InvalidRollWindow::TooLong { bytes: text.len() });
        }
        if text.trim().is_empty() {
            return Err(InvalidRollWindow::Empty);
        }
        let mut windows = Vec::new();
        for (index, part) in text.split(';').enumerate() {
            if index == MAX_WINDOWS {
                return Err(InvalidRollWindow::TooMany);
            }
            let window = RollWindow::parse(part)
                .map_err(|problem| InvalidRollWindow::Window { window: index + 1, problem })?;
            windows.push(window);
        }
        Ok(RollWindows { windows })
    }

    /// Whether a window is open at `at`. An instant jiff cannot place (beyond
    /// the years ±9999) is closed.
    pub fn is_open(&self, at: SystemTime) -> bool {
        Timestamp::try_from(at).is_ok_and(|at| self.is_open_at(at))
    }

    /// The first instant at or after `after` at which a window is open.
    /// `None` only for an instant jiff cannot place: every window opens
    /// within the days searched.
    pub fn next_opening(&self, after: SystemTime) -> Option<SystemTime> {
        let after = Timestamp::try_from(after).ok()?;
        let opening = self.next_opening_at(after)?;
        Some(SystemTime::from(opening))
    }

    /// The first instant at or after `at` at which every window is closed:
    /// `at` itself when none is open. `None` when the windows stay open for
    /// more than a week from `at` (they cover the whole week).
    pub fn next_closing(&self, at: SystemTime) -> Option<SystemTime> {
        let at = Timestamp::try_from(at).ok()?;
        let closing = self.next_closing_at(at)?;
        Some(SystemTime::from(closing))
    }

    fn is_open_at(&self, at: Timestamp) -> bool {
        self.windows.iter().any(|w| w.contains(at))
    }

    fn next_opening_at(&self, after: Timestamp) -> Option<Timestamp> {
        if self.is_open_at(after) {
            return Some(after);
        }
        // Not open at `after`: every interval that ends after it starts after it.
        self.windows
            .iter()
            .flat_map(|w| w.intervals(after, SEARCH_DAYS))
            .filter(|&(_, end)| end > after)
            .map(|(start, _)| start)
            .min()
    }

    fn next_closing_at(&self, at: Timestamp) -> Option<Timestamp> {
        let mut intervals: Vec<_> =
            self.windows.iter().flat_map(|w| w.intervals(at, SEARCH_DAYS)).collect();
        intervals.sort_unstable();
        // Sweep the intervals by start, following each that covers the
        // instant reached so far: windows that touch or overlap chain.
        let mut closing = at;
        for (start, end) in intervals {
            if start <= closing && closing < end {
                closing = end;
            }
        }
        let horizon = at.checked_add(OPEN_FOR_GOOD).ok()?;
        (closing < horizon).then_some(closing)
    }
}

impl RollWindow {
    fn parse(part: &str) -> Result<RollWindow, Problem> {
        let fields: Vec<&str> = part.split_ascii_whitespace().take(4).collect();
        let [days, times, zone] = fields[..] else {
            return Err(if fields.is_empty() {
                Problem::Empty
            } else {
                Problem::Fields { found: part.split_ascii_whitespace().count() }
            });
        };
        let days = Days::parse(days)?;
        let (start, end) = parse_times(times)?;
        let zone = TimeZone::get(zone).map_err(|_| Problem::Zone { token: echo(zone) })?;
        Ok(RollWindow { days, start, end, zone })
    }

    fn contains(&self, at: Timestamp) -> bool {
        self.intervals(at, 1).any(|(start, end)| start <= at && at < end)
    }

    /// The window's intervals that start on the local days from
    /// [`DAYS_BEFORE`] before `around`'s local day to `days_after` after it,
    /// in order, empty ones left out.
    fn intervals(
        &self,
        around: Timestamp,
        days_after: usize,
    ) -> impl Iterator<Item = (Timestamp, Timestamp)> + '_ {
        let today = self.zone.to_datetime(around).date();
        let first = (0..DAYS_BEFORE).try_fold(today, |d, _| d.yesterday()).ok();
        std::iter::successors(first, |d| d.tomorrow().ok())
            .take(DAYS_BEFORE + 1 + days_after)
            .filter_map(|date| self.interval(date))
    }

    /// The interval starting on local `date`, if the window starts that
    /// weekday and the interval is not empty (it can be: a window wholly
    /// inside a DST gap).
    fn interval(&self, date: Date) -> Option<(Timestamp, Timestamp)> {
        if !self.days.contains(date.weekday()) {
            return None;
        }
        let end_date = if self.end > self.start { date } else { date.tomorrow().ok()? };
        let start = resolve(&self.zone, self.start.to_datetime(date))?;
        let end = resolve(&self.zone, self.end.to_datetime(end_date))?;
        (start < end).then_some((start, end))
    }
}

/// The instant of a local time: in a gap, the first instant after the gap (the
/// transition itself, not jiff's `compatible`, which moves the time forward by
/// the gap's length); in a fold, its first occurrence. `None` out of range.
fn resolve(zone: &TimeZone, local: DateTime) -> Option<Timestamp> {
    match zone.to_ambiguous_timestamp(local).offset() {
        AmbiguousOffset::Unambiguous { offset } => offset.to_timestamp(local).ok(),
        AmbiguousOffset::Fold { before, .. } => before.to_timestamp(local).ok(),
        AmbiguousOffset::Gap { after, .. } => {
            // Read with the later offset, the local time names an instant
            // before the transition (the offset grows across a gap); the
            // transition that follows is the one that skipped it.
            let before_transition = after.to_timestamp(local).ok()?;
            zone.following(before_transition).next().map(|t| t.timestamp())
        }
    }
}

impl Days {
    const EVERY: Days = Days(0b111_1111);

    fn contains(self, day: Weekday) -> bool {
        self.0 & Days::bit(day) != 0
    }

    fn bit(day: Weekday) -> u8 {
        1 << day.to_monday_zero_offset()
    }

    /// `*`, or a comma list of days (`Sat`) and ranges (`Mon-Fri`, `Fri-Mon`
    /// across the week's end).
    fn parse(field: &str) -> Result<Days, Problem> {
        if field == "*" {
            return Ok(Days::EVERY);
        }
        let mut days = Days(0);
        for item in field.split(',') {
            if item == "*" {
                return Err(Problem::Star);
            }
            match item.split_once('-') {
                None => days.0 |= Days::bit(day(item)?),
                Some((from, to)) => {
                    let (from, to) = (day(from)?, day(to)?);
                    if from == to {
                        return Err(Problem::DayRange { token: echo(item) });
                    }
                    let span = from.until(to);
                    for d in from.cycle_forward().take(span as usize + 1) {
                        days.0 |= Days::bit(d);
                    }
                }
            }
        }
        Ok(days)
    }
}

fn day(name: &str) -> Result<Weekday, Problem> {
    DAY_NAMES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|&(_, d)| d)
        .ok_or_else(|| Problem::Day { token: echo(name) })
}

/// `HH:MM-HH:MM`, two digits each.
fn parse_times(field: &str) -> Result<(Time, Time), Problem> {
    let bad = || Problem::Times { token: echo(field) };
    let (start, end) = field.split_once('-').ok_or_else(bad)?;
    let (start, end) = (hh_mm(start).ok_or_else(bad)?, hh_mm(end).ok_or_else(bad)?);
    if start == end {
        return Err(Problem::SameStartEnd { token: echo(field) });
    }
    Ok((start, end))
}

fn hh_mm(text: &str) -> Option<Time> {
    let &[h1, h2, b':', m1, m2] = text.as_bytes() else { return None };
    let digit = |b: u8| b.is_ascii_digit().then(|| (b - b'0') as i8);
    let hour = digit(h1)? * 10 + digit(h2)?;
    let minute = digit(m1)? * 10 + digit(m2)?;
    if hour > 23 || minute > 59 {
        return None;
    }
    Time::new(hour, minute, 0, 0).ok()
}

/// A tenant's token as an error may quote it: shortened, quoted, escaped.
fn echo(token: &str) -> String {
    format!("{:?}", shorten_middle(token, MAX_ECHO))
}

impl fmt::Display for RollWindows {
    /// The windows as parsed, `;`-joined: what explain shows.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, w) in self.windows.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{} {}-{} ", w.days, w.start.strftime("%H:%M"), w.end.strftime("%H:%M"))?;
            f.write_str(w.zone.iana_name().unwrap_or("?"))?;
        }
        Ok(())
    }
}

impl fmt::Display for Days {
    /// `*`, or the days as a comma list with runs of three or more as ranges.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Days::EVERY {
            return f.write_str("*");
        }
        let mut items = Vec::new();
        let mut i = 0;
        while i < 7 {
            if !self.contains(DAY_NAMES[i].1) {
                i += 1;
                continue;
            }
            let mut j = i;
            while j + 1 < 7 && self.contains(DAY_NAMES[j + 1].1) {
                j += 1;
            }
            match j - i {
                0 => items.push(DAY_NAMES[i].0.to_owned()),
                1 => items.push(format!("{},{}", DAY_NAMES[i].0, DAY_NAMES[j].0)),
                _ => items.push(format!("{}-{}", DAY_NAMES[i].0, DAY_NAMES[j].0)),
            }
            i = j + 1;
        }
        f.write_str(&items.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn windows(text: &str) -> RollWindows {
        match RollWindows::parse(text) {
            Ok(w) => w,
            Err(e) => panic!("{text:?} should parse: {e}"),
        }
    }

    fn error(text: &str) -> String {
        match RollWindows::parse(text) {
            Ok(w) => panic!("{text:?} should not parse, read as {w}"),
            Err(e) => e.to_string(),
        }
    }

    fn utc(text: &str) -> SystemTime {
        let ts: Timestamp = text.parse().expect("a test instant");
        SystemTime::from(ts)
    }

    fn open(text: &str, at: &str) -> bool {
        windows(text).is_open(utc(at))
    }

    fn opening(text: &str, after: &str) -> Option<SystemTime> {
        windows(text).next_opening(utc(after))
    }

    fn closing(text: &str, at: &str) -> Option<SystemTime> {
        windows(text).next_closing(utc(at))
    }

    #[test]
    fn the_grammar_reads_days_times_and_zone() {
        assert_eq!(
            windows("Mon-Fri 22:00-02:00 Europe/Berlin").to_string(),
            "Mon-Fri 22:00-02:00 Europe/Berlin"
        );
        assert_eq!(windows("Sat,Sun 00:00-06:00 UTC").to_string(), "Sat,Sun 00:00-06:00 UTC");
        assert_eq!(windows("* 09:30-10:00 Asia/Kolkata").to_string(), "* 09:30-10:00 Asia/Kolkata");
        assert_eq!(
            windows("Mon-Wed,Fri 01:00-02:00 UTC").to_string(),
            "Mon-Wed,Fri 01:00-02:00 UTC"
        );
        // A range may cross the week's end; repeats are a union.
        assert_eq!(windows("Fri-Mon 01:00-02:00 UTC").to_string(), "Mon,Fri-Sun 01:00-02:00 UTC");
        assert_eq!(
            windows("Mon,Mon,Sun-Tue 01:00-02:00 UTC").to_string(),
            "Mon,Tue,Sun 01:00-02:00 UTC"
        );
        assert_eq!(windows("Mon-Sun 01:00-02:00 UTC").to_string(), "* 01:00-02:00 UTC");
        // Zone names are found regardless of case, and shown as the tzdb spells them.
        assert_eq!(
            windows("Mon 01:00-02:00 europe/berlin").to_string(),
            "Mon 01:00-02:00 Europe/Berlin"
        );
        // Several windows, spaces around the separator and between fields.
        let several = windows(" Mon 01:00-02:00 UTC ;Tue   03:00-04:00\tEurope/Berlin");
        assert_eq!(several.to_string(), "Mon 01:00-02:00 UTC; Tue 03:00-04:00 Europe/Berlin");
        assert_eq!(
            windows("Sun 23:59-00:00 America/New_York").to_string(),
            "Sun 23:59-00:00 America/New_York"
        );
    }

    #[test]
    fn each_invalid_form_says_what_is_wrong() {
        assert_eq!(error(""), "roll window is empty");
        assert_eq!(error(" \t "), "roll window is empty");
        assert_eq!(error("Mon 01:00-02:00 UTC;"), "window 2: nothing between `;`");
        assert_eq!(error(";Mon 01:00-02:00 UTC"), "window 1: nothing between `;`");
        assert_eq!(
            error("Mon 01:00-02:00"),
            "window 1: expected `<days> <HH:MM>-<HH:MM> <zone>`, found 2 fields"
        );
        assert_eq!(
            error("Mon 01:00-02:00 Europe/Berlin extra words"),
            "window 1: expected `<days> <HH:MM>-<HH:MM> <zone>`, found 5 fields"
        );
        assert_eq!(
            error("Mon"),
            "window 1: expected `<days> <HH:MM>-<HH:MM> <zone>`, found 1 fields"
        );
        assert_eq!(
            error("Mon 01:00-02:00 UTC; Mnn 01:00-02:00 UTC"),
            "window 2: unknown day \"Mnn\" (days are Mon Tue Wed Thu Fri Sat Sun, or *)"
        );
        assert_eq!(
            error("mon 01:00-02:00 UTC"),
            "window 1: unknown day \"mon\" (days are Mon Tue Wed Thu Fri Sat Sun, or *)"
        );
        assert_eq!(
            error("Monday 01:00-02:00 UTC"),
            "window 1: unknown day \"Monday\" (days are Mon Tue Wed Thu Fri Sat Sun, or *)"
        );
        assert!(error("Mon, 01:00-02:00 UTC").starts_with("window 1: unknown day \"\""));
        assert!(
            error("Mon-Fri-Sat 01:00-02:00 UTC").starts_with("window 1: unknown day \"Fri-Sat\"")
        );
        assert_eq!(
            error("Tue-Tue 01:00-02:00 UTC"),
            "window 1: day range \"Tue-Tue\" starts and ends on the same day"
        );
        assert_eq!(
            error("*,Mon 01:00-02:00 UTC"),
            "window 1: `*` means every day and stands alone"
        );
        let times =
            |t: &str| format!("window 1: times \"{t}\" are not HH:MM-HH:MM (HH 00-23, MM 00-59)");
        for bad in [
            "25:00-26:00",
            "24:00-01:00",
            "00:00-24:00",
            "12:60-13:00",
            "9:00-10:00",
            "09:00",
            "09:00-",
            "-10:00",
            "09:00-10:00-11:00",
            "0900-1000",
            "09:00_10:00",
            "+9:00-10:00",
            "09:0a-10:00",
            "09:00:00-10:00",
        ] {
            assert_eq!(error(&format!("Mon {bad} UTC")), times(bad), "{bad}");
        }
        assert_eq!(
            error("Mon 10:00-10:00 UTC"),
            "window 1: times \"10:00-10:00\" start where they end: a zero-length or 24-hour window is ambiguous"
        );
        assert_eq!(
            error("Mon 10:00-11:00 Europe/Berln"),
            "window 1: unknown time zone \"Europe/Berln\" (an IANA name such as Europe/Berlin or UTC)"
        );
        for zone in ["+02:00", "CET-1CEST,M3.5.0,M10.5.0/3", "/etc/localtime", "../../etc/passwd"] {
            assert!(
                error(&format!("Mon 10:00-11:00 {zone}")).contains("unknown time zone"),
                "{zone}"
            );
        }
    }

    #[test]
    fn hostile_text_is_refused_in_bounded_words() {
        let huge = "Mon 01:00-02:00 UTC;".repeat(1000);
        assert_eq!(error(&huge), "roll window is 20000 bytes, more than the 1024 allowed");
        let many = vec!["Mon 01:00-02:00 UTC"; 17].join(";");
        assert_eq!(error(&many), "roll window has more than 16 windows");
        assert_eq!(windows(&vec!["Mon 01:00-02:00 UTC"; 16].join(";")).windows.len(), 16);
        // A long token is quoted shortened in the middle; control characters escaped.
        let long = format!("Mon 01:00-02:00 {}", "Z".repeat(1000));
        let message = error(&long[..1000]);
        assert!(message.len() < 120, "{message}");
        assert!(message.contains("\"ZZZZZZZZZZZZZZZZZZZZ…ZZZZZZZZZZZZZZZZZZZ\""), "{message}");
        let control = error("Mon\u{1b}[31m 01:00-02:00 UTC");
        assert!(control.contains("\"Mon\\u{1b}[31m\""), "{control}");
        assert!(!control.contains('\u{1b}'));
        let nul = error("Mon 01:00-02:00 U\0TC");
        assert!(nul.contains("\"U\\0TC\""), "{nul}");
        // Non-ASCII space does not separate fields.
        assert!(error("Mon\u{a0}01:00-02:00 UTC").contains("found 2 fields"));
        // ASCII whitespace does, and a YAML block scalar's final newline is no field.
        assert_eq!(windows("Mon\t01:00-02:00 UTC\n").to_string(), "Mon 01:00-02:00 UTC");
    }

    #[test]
    fn a_window_is_open_from_its_start_to_before_its_end() {
        // 2026-01-05 is a Monday; Berlin is at +01:00 in winter.
        let w = "Mon-Fri 09:00-17:00 Europe/Berlin";
        assert!(!open(w, "2026-01-05T07:59:59Z"));
        assert!(open(w, "2026-01-05T08:00:00Z"));
        assert!(open(w, "2026-01-05T15:59:59Z"));
        assert!(!open(w, "2026-01-05T16:00:00Z"));
        assert!(!open(w, "2026-01-10T10:00:00Z"), "Saturday");
        assert!(open(w, "2026-01-09T10:00:00Z"), "Friday");
        assert_eq!(opening(w, "2026-01-09T16:00:00Z"), Some(utc("2026-01-12T08:00:00Z")));
        assert_eq!(opening(w, "2026-01-09T10:00:00Z"), Some(utc("2026-01-09T10:00:00Z")));
        assert_eq!(closing(w, "2026-01-09T10:00:00Z"), Some(utc("2026-01-09T16:00:00Z")));
        assert_eq!(closing(w, "2026-01-09T17:00:00Z"), Some(utc("2026-01-09T17:00:00Z")));
    }

    #[test]
    fn an_end_before_the_start_ends_the_next_day() {
        // Friday 2026-01-02 22:00 to Saturday 02:00, Berlin (+01:00).
        let w = "Fri 22:00-02:00 Europe/Berlin";
        assert!(!open(w, "2026-01-02T20:59:59Z"));
        assert!(open(w, "2026-01-02T21:00:00Z"));
        assert!(open(w, "2026-01-03T00:30:00Z"), "Saturday 01:30, opened Friday");
        assert!(!open(w, "2026-01-03T01:00:00Z"));
        assert!(!open(w, "2026-01-03T21:30:00Z"), "Saturday 22:30: it opens on Fridays");
        assert!(!open(w, "2026-01-02T00:30:00Z"), "Friday 01:30: opened Thursday, not Friday");
        assert_eq!(opening(w, "2026-01-03T01:00:00Z"), Some(utc("2026-01-09T21:00:00Z")));
        // To midnight.
        let w = "Sun 23:00-00:00 UTC";
        assert!(open(w, "2026-01-04T23:59:59Z"));
        assert!(!open(w, "2026-01-05T00:00:00Z"));
    }

    #[test]
    fn every_day_and_several_windows() {
        let w = "* 03:00-04:00 Asia/Kolkata"; // +05:30
        for day in 1..=7 {
            assert!(open(w, &format!("2026-06-0{day}T21:30:00Z")), "day {day}");
            assert!(!open(w, &format!("2026-06-0{day}T22:30:00Z")), "day {day}");
        }
        // Touching windows in two zones chain into one open stretch.
        let w = "Mon 10:00-12:00 UTC; Mon 13:00-15:00 Europe/Berlin; Tue 00:00-01:00 UTC";
        assert!(open(w, "2026-01-05T11:59:00Z"));
        assert!(open(w, "2026-01-05T12:00:00Z"), "13:00 in Berlin");
        assert!(!open(w, "2026-01-05T14:00:00Z"));
        assert_eq!(closing(w, "2026-01-05T10:30:00Z"), Some(utc("2026-01-05T14:00:00Z")));
        assert_eq!(opening(w, "2026-01-05T14:00:00Z"), Some(utc("2026-01-06T00:00:00Z")));
        // A whole day is two windows.
        let saturday = "Sat 00:00-12:00 UTC; Sat 12:00-00:00 UTC";
        assert!(open(saturday, "2026-01-03T00:00:00Z") && open(saturday, "2026-01-03T23:59:59Z"));
        assert!(!open(saturday, "2026-01-04T00:00:00Z"));
        assert_eq!(closing(saturday, "2026-01-03T05:00:00Z"), Some(utc("2026-01-04T00:00:00Z")));
        // Covering the whole week: open, never closing.
        let always = "* 00:00-12:00 UTC; * 12:00-00:00 UTC";
        assert!(open(always, "2026-03-29T01:30:00Z"));
        assert_eq!(closing(always, "2026-03-29T01:30:00Z"), None);
    }

    #[test]
    fn a_start_in_a_dst_gap_opens_at_the_first_instant_after_it() {
        // Berlin skips 02:00-03:00 on Sunday 2026-03-29 (+01:00 -> +02:00 at 01:00Z).
        let w = "Sun 02:30-04:00 Europe/Berlin";
        assert!(!open(w, "2026-03-29T00:59:59Z"));
        assert!(open(w, "2026-03-29T01:00:00Z"), "03:00 local, not 03:30 as `compatible` says");
        assert!(open(w, "2026-03-29T01:59:59Z"));
        assert!(!open(w, "2026-03-29T02:00:00Z"), "04:00 local, +02:00");
        assert_eq!(opening(w, "2026-03-28T12:00:00Z"), Some(utc("2026-03-29T01:00:00Z")));
        assert_eq!(closing(w, "2026-03-29T01:00:00Z"), Some(utc("2026-03-29T02:00:00Z")));
        // An end in the gap closes at the same instant.
        let w = "Sun 01:00-02:30 Europe/Berlin";
        assert!(open(w, "2026-03-29T00:00:00Z"));
        assert!(!open(w, "2026-03-29T01:00:00Z"));
        assert_eq!(closing(w, "2026-03-29T00:00:00Z"), Some(utc("2026-03-29T01:00:00Z")));
        // Wholly inside the gap: it does not open that day, but a week later.
        let w = "Sun 02:10-02:50 Europe/Berlin";
        assert_eq!(opening(w, "2026-03-28T12:00:00Z"), Some(utc("2026-04-05T00:10:00Z")));
        // Overnight into the gap's day.
        let w = "Sat 23:00-02:30 Europe/Berlin";
        assert!(open(w, "2026-03-28T22:00:00Z"));
        assert!(open(w, "2026-03-29T00:59:59Z"));
        assert!(!open(w, "2026-03-29T01:00:00Z"));
    }

    #[test]
    fn a_boundary_in_a_repeated_hour_is_its_first_occurrence() {
        // Berlin repeats 02:00-03:00 on Sunday 2026-10-25: +02:00 until 01:00Z, then +01:00.
        let w = "Sun 02:30-05:00 Europe/Berlin";
        assert!(!open(w, "2026-10-25T00:29:59Z"));
        assert!(open(w, "2026-10-25T00:30:00Z"), "the first 02:30, +02:00");
        assert!(open(w, "2026-10-25T03:59:59Z"));
        assert!(!open(w, "2026-10-25T04:00:00Z"), "05:00 local, +01:00");
        let w = "Sun 01:00-02:30 Europe/Berlin";
        assert!(open(w, "2026-10-24T23:00:00Z"), "01:00 local, +02:00");
        assert!(!open(w, "2026-10-25T00:30:00Z"), "closed at the first 02:30");
        assert!(!open(w, "2026-10-25T01:10:00Z"), "the second 02:10 is after the end");
    }

    #[test]
    fn new_york_and_lord_howe_follow_the_same_rules() {
        // New York skips 02:00-03:00 on Sunday 2026-03-08 (-05:00 -> -04:00 at 07:00Z).
        let w = "Sat 23:00-02:30 America/New_York";
        assert!(open(w, "2026-03-08T04:00:00Z"), "Saturday 23:00, -05:00");
        assert!(open(w, "2026-03-08T06:59:59Z"));
        assert!(!open(w, "2026-03-08T07:00:00Z"));
        // Lord Howe shifts by 30 minutes: skips 02:00-02:30 on Sunday 2026-10-04
        // (+10:30 -> +11:00 at 2026-10-03T15:30Z) and repeats 01:30-02:00 on
        // Sunday 2026-04-05 (+11:00 -> +10:30 at 2026-04-04T15:00Z).
        let w = "Sun 02:15-03:00 Australia/Lord_Howe";
        assert_eq!(opening(w, "2026-10-03T00:00:00Z"), Some(utc("2026-10-03T15:30:00Z")));
        assert_eq!(closing(w, "2026-10-03T15:30:00Z"), Some(utc("2026-10-03T16:00:00Z")));
        let w = "Sun 01:45-03:00 Australia/Lord_Howe";
        assert_eq!(opening(w, "2026-04-04T00:00:00Z"), Some(utc("2026-04-04T14:45:00Z")));
        assert_eq!(closing(w, "2026-04-04T14:45:00Z"), Some(utc("2026-04-04T16:30:00Z")));
    }

    #[test]
    fn the_clock_out_of_range_is_closed() {
        let w = windows("* 00:00-12:00 UTC; * 12:00-00:00 UTC");
        let far = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(400_000_000_000);
        assert!(!w.is_open(far));
        assert_eq!(w.next_opening(far), None);
    }

    #[test]
    fn the_workload_annotation_wins_then_the_namespace_then_the_flag() {
        assert_eq!(effective(Some("w"), Some("n"), Some("f")), Some("w"));
        assert_eq!(effective(None, Some("n"), Some("f")), Some("n"));
        assert_eq!(effective(None, None, Some("f")), Some("f"));
        assert_eq!(effective(None, None, None), None);
        assert_eq!(effective(Some("not a window"), Some("n"), None), Some("not a window"));
    }

    /// The zones the properties roam: no DST, a one-hour shift either side of
    /// the Atlantic, a 30-minute shift, and a half-hour offset.
    const ZONES: [&str; 5] =
        ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"];

    /// 2026-01-01T00:00:00Z and 2028-01-01T00:00:00Z.
    const FROM: i64 = 1_767_225_600;
    const UNTIL: i64 = 1_830_297_600;

    fn instant(second: i64) -> SystemTime {
        SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(second as u64)
    }

    /// An instant in 2026-2027: uniform, or within six hours of one of the
    /// zone's transitions (where the DST rules bite), minute-aligned half the
    /// time so boundaries are hit exactly.
    fn pick(zone: &TimeZone, near_transition: bool, k: usize, jitter: i64, uniform: i64) -> i64 {
        let start = Timestamp::from_second(FROM).expect("in range");
        let transitions: Vec<i64> = zone
            .following(start)
            .map(|t| t.timestamp().as_second())
            .take_while(|&s| s < UNTIL)
            .collect();
        let second = match transitions.get(k % transitions.len().max(1)) {
            Some(t) if near_transition => t + jitter,
            _ => uniform,
        };
        if jitter % 2 == 0 { second - second.rem_euclid(60) } else { second }
    }

    /// Whether local wall time `at` falls in the window's range on a day it
    /// starts (the day itself, or the day before for an overnight window).
    fn wall_in_range(w: &RollWindow, at: DateTime) -> bool {
        let (day, time) = (at.date().weekday(), at.time());
        if w.start < w.end {
            w.days.contains(day) && w.start <= time && time < w.end
        } else {
            (w.days.contains(day) && w.start <= time)
                || (w.days.contains(day.previous()) && time < w.end)
        }
    }

    fn window_text(days: u8, start: u16, end: u16, zone: usize) -> String {
        let days = Days(days);
        let hm = |m: u16| format!("{:02}:{:02}", m / 60, m % 60);
        format!("{days} {}-{} {}", hm(start), hm(end), ZONES[zone])
    }

    fn a_window() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        // Quarter hours hit the transitions (02:00, 02:30, 03:00) often.
        let minute = prop_oneof![(0u16..96).prop_map(|q| q * 15), 0u16..1440];
        (1u8..128, minute.clone(), minute, 0..ZONES.len())
            .prop_filter("start and end differ", |(_, s, e, _)| s != e)
            .prop_map(|(d, s, e, z)| window_text(d, s, e, z))
    }

    fn check_wall_clock(
        text: &str,
        second: i64,
    ) -> Result<(), proptest::test_runner::TestCaseError> {
        let windows = windows(text);
        let w = &windows.windows[0];
        let at = Timestamp::from_second(second).expect("in range");
        let wall = w.zone.to_datetime(at);
        let is_open = windows.is_open(instant(second));
        let in_range = wall_in_range(w, wall);
        // In a repeated hour, the first pass reads like any wall time (both
        // boundaries resolve to first occurrences); the second may be open
        // below the start, since the window opened in the first.
        let repeated = match w.zone.to_ambiguous_timestamp(wall).offset() {
            AmbiguousOffset::Fold { before, .. } => before.to_timestamp(wall).ok() != Some(at),
            _ => false,
        };
        if !repeated {
            proptest::prop_assert_eq!(is_open, in_range, "{} at {} ({})", text, at, wall);
        }
        Ok(())
    }

    fn check_next(text: &str, second: i64) -> Result<(), proptest::test_runner::TestCaseError> {
        let windows = windows(text);
        let at = instant(second);
        let opening = windows.next_opening(at);
        proptest::prop_assert!(opening.is_some(), "{text} never opens after {second}");
        let opening = opening.unwrap_or(at);
        proptest::prop_assert!(opening >= at);
        proptest::prop_assert!(windows.is_open(opening), "{text}: {second} -> {opening:?}");
        if windows.is_open(at) {
            proptest::prop_assert_eq!(opening, at);
        }
        let wait = opening.duration_since(at).unwrap_or_default();
        for i in 0..16u32 {
            let between = at + wait * i / 16;
            proptest::prop_assert!(between == opening || !windows.is_open(between));
        }
        if wait >= std::time::Duration::from_secs(1) {
            let just_before = opening - std::time::Duration::from_secs(1);
            proptest::prop_assert!(!windows.is_open(just_before), "{text} opened before");
        }
        if let Some(closing) = windows.next_closing(opening) {
            proptest::prop_assert!(closing > opening);
            proptest::prop_assert!(!windows.is_open(closing), "{text} open at its closing");
            let open_for = closing.duration_since(opening).unwrap_or_default();
            for i in 0..16u32 {
                proptest::prop_assert!(windows.is_open(opening + open_for * i / 16));
            }
        }
        Ok(())
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 512, ..proptest::prelude::ProptestConfig::default()
        })]

        /// Open exactly at the wall times inside the range on a matching day,
        /// but for the second pass of a repeated hour (the window opened at
        /// the first, and may be open or closed there).
        #[test]
        fn open_exactly_at_the_wall_times_written(
            text in a_window(),
            near in proptest::bool::ANY,
            k in 0usize..8,
            jitter in -6 * 3600i64..6 * 3600,
            uniform in FROM..UNTIL,
        ) {
            let zone = &windows(&text).windows[0].zone;
            check_wall_clock(&text, pick(zone, near, k, jitter, uniform))?;
        }

        /// The next opening is open, not before the instant asked about, and
        /// nothing sampled between them is; an open instant is its own next
        /// opening. The next closing mirrors it.
        #[test]
        fn next_opening_and_closing_are_the_first_change(
            texts in proptest::collection::vec(a_window(), 1..4),
            near in proptest::bool::ANY,
            k in 0usize..8,
            jitter in -6 * 3600i64..6 * 3600,
            uniform in FROM..UNTIL,
        ) {
            let text = texts.join("; ");
            let zone = &windows(&text).windows[0].zone;
            check_next(&text, pick(zone, near, k, jitter, uniform))?;
        }

        /// Both, for windows that start or end near a transition's wall time,
        /// on its Sunday, at instants around it: where gaps and folds bite.
        #[test]
        fn on_dst_days_too(
            zone in 1usize..4,
            k in 0usize..4,
            quarters in (-8i64..8, -8i64..12),
            days in 0u8..128,
            jitter in -3 * 3600i64..3 * 3600,
        ) {
            let tz = TimeZone::get(ZONES[zone]).expect("a zone of the list");
            let start = Timestamp::from_second(FROM).expect("in range");
            let transition = tz.following(start).nth(k).expect("four in two years").timestamp();
            let wall = tz.to_datetime(transition).time();
            let minute = |q: i64| {
                let m = i64::from(wall.hour()) * 60 + i64::from(wall.minute()) + q * 15;
                m.rem_euclid(1440) as u16
            };
            let (s, e) = (minute(quarters.0), minute(quarters.1));
            proptest::prop_assume!(s != e);
            let text = window_text(days | 0b100_0000, s, e, zone);
            let second = transition.as_second() + jitter;
            check_wall_clock(&text, second)?;
            check_next(&text, second)?;
        }

        /// Whatever a tenant writes: no panic, and an error in bounded words.
        #[test]
        fn any_text_parses_or_says_why_briefly(text in "[ -~\\t\\n\u{0}-\u{1f}…é]{0,300}") {
            if let Err(e) = RollWindows::parse(&text) {
                proptest::prop_assert!(e.to_string().chars().count() < 600, "{e}");
            }
        }
    }
}
