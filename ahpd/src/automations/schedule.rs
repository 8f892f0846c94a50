//! Schedules: AHP's portable five-field cron in a named IANA time zone, read by `croner` and
//! evaluated in `jiff`'s zoned time, so daylight saving is the crates' to get right. Also which
//! occurrences fell due since the schedule was last looked at, and which of them were missed.

use ahp_types::state::AutomationSchedule;
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;
use jiff::tz::TimeZone;
use jiff::{Timestamp, Zoned};

use crate::clock::Millis;

/// The five fields, in order, as a refusal names them.
const FIELDS: [&str; 5] = ["minute", "hour", "day of month", "month", "day of week"];
const MONTHS: [&str; 12] = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"];
const DAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// An occurrence more than this late when the schedule is looked at was missed (the daemon was
/// down, the laptop asleep), and its trigger's misfire policy decides whether it runs.
pub const GRACE_MS: Millis = 60_000;

/// A schedule, read.
#[derive(Debug, Clone)]
pub struct Schedule {
    cron: Cron,
    zone: TimeZone,
}

impl Schedule {
    /// Reads a schedule, or says which of its fields is wrong and why (`at` names where it sits
    /// in the definition).
    pub fn read(schedule: &AutomationSchedule, at: &str) -> Result<Self, String> {
        let zone = TimeZone::get(&schedule.time_zone).map_err(|_| {
            format!(
                "{at}.timeZone: {:?} is not an IANA time zone (for example \"UTC\" or \"Europe/Berlin\")",
                schedule.time_zone
            )
        })?;
        portable(&schedule.expression).map_err(|why| format!("{at}.expression: {why}"))?;
        let parser = CronParser::builder().seconds(Seconds::Disallowed).year(Year::Disallowed).build();
        let cron = parser.parse(&schedule.expression).map_err(|e| {
            format!("{at}.expression: {:?} is not a cron expression this host can read: {e}", schedule.expression)
        })?;
        Ok(Self { cron, zone })
    }

    /// The first occurrence after `after` (milliseconds), when there is one.
    pub fn next_after(&self, after: Millis) -> Option<Millis> {
        let start = self.zoned(after)?;
        let next = self.cron.find_next_occurrence(&start, false).ok()?;
        u64::try_from(next.timestamp().as_millisecond()).ok()
    }

    /// The next `n` occurrences after `after`, for a preview.
    pub fn preview(&self, after: Millis, n: usize) -> Vec<Millis> {
        let mut out = Vec::with_capacity(n);
        let mut from = after;
        while out.len() < n {
            let Some(next) = self.next_after(from) else { break };
            out.push(next);
            from = next;
        }
        out
    }

    /// The occurrences in `(after, up_to]`, oldest first, at most `cap` of the newest.
    pub fn due(&self, after: Millis, up_to: Millis, cap: usize) -> Vec<Millis> {
        let mut found = Vec::new();
        let mut from = after;
        while let Some(next) = self.next_after(from).filter(|n| *n <= up_to) {
            found.push(next);
            if found.len() > cap {
                found.remove(0);
            }
            from = next;
        }
        found
    }

    fn zoned(&self, ms: Millis) -> Option<Zoned> {
        let ts = Timestamp::from_millisecond(i64::try_from(ms).ok()?).ok()?;
        Some(ts.to_zoned(self.zone.clone()))
    }
}

/// Checks an expression against AHP's portable grammar: exactly five fields, each `*`, values,
/// ranges, lists and steps of them, month and day names; no seconds, years, `@daily` and the like,
/// `?`, `L`, `W` or `#`.
fn portable(expression: &str) -> Result<(), String> {
    let fields: Vec<&str> = expression.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "{expression:?} has {} fields; a schedule has exactly five: minute, hour, day of month, month, day of week",
            fields.len()
        ));
    }
    for (n, field) in fields.iter().enumerate() {
        let names: &[&str] = match n {
            3 => &MONTHS,
            4 => &DAYS,
            _ => &[],
        };
        for part in field.split(',') {
            let (range, step) = match part.split_once('/') {
                Some((range, step)) => (range, Some(step)),
                None => (part, None),
            };
            if let Some(step) = step {
                if !step.parse::<u32>().is_ok_and(|s| s > 0) {
                    return Err(format!("the {} field's step {step:?} is not a positive whole number", FIELDS[n]));
                }
            }
            if range == "*" {
                continue;
            }
            for value in range.splitn(2, '-') {
                let known = value.parse::<u32>().is_ok() || names.iter().any(|name| name.eq_ignore_ascii_case(value));
                if !known {
                    return Err(format!("the {} field's {value:?} is not a value it takes", FIELDS[n]));
                }
            }
        }
    }
    Ok(())
}

/// An RFC 3339 time as milliseconds since the epoch.
pub fn millis_of(iso: &str) -> Option<Millis> {
    let ts: Timestamp = iso.parse().ok()?;
    u64::try_from(ts.as_millisecond()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(expression: &str, zone: &str) -> Result<Schedule, String> {
        Schedule::read(
            &AutomationSchedule { expression: expression.into(), time_zone: zone.into() },
            "triggers[0].schedule",
        )
    }

    #[test]
    fn reads_the_portable_grammar_and_refuses_the_rest_naming_the_field() {
        for ok in ["0 9 * * 1-5", "*/15 * * * *", "0 0 1,15 JAN-jun sun", "1-30/2 * * * 7"] {
            schedule(ok, "Europe/Berlin").unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for (bad, says) in [
            ("* * * *", "has 4 fields"),
            ("0 * * * * *", "has 6 fields"),
            ("@daily", "has 1 fields"),
            ("0 0 L * *", "day of month field's \"L\""),
            ("0 0 ? * MON", "day of month"),
            ("0 0 * * 5#2", "day of week"),
            ("*/0 * * * *", "step \"0\""),
            ("61 * * * *", "not a cron expression"),
        ] {
            let e = schedule(bad, "UTC").expect_err(bad);
            assert!(e.starts_with("triggers[0].schedule.expression: "), "{e}");
            assert!(e.contains(says), "{bad}: {e}");
        }
        let e = schedule("0 9 * * *", "Mars/Olympus").expect_err("zone");
        assert!(e.starts_with("triggers[0].schedule.timeZone: \"Mars/Olympus\" is not an IANA time zone"), "{e}");
    }

    #[test]
    fn occurrences_follow_the_zone_across_daylight_saving() {
        // 09:00 in Berlin is 08:00 UTC in winter and 07:00 UTC in summer.
        let daily = schedule("0 9 * * *", "Europe/Berlin").expect("schedule");
        let before_switch = millis_of("2026-03-28T12:00:00Z").expect("time");
        let next = daily.preview(before_switch, 2);
        assert_eq!(
            next,
            vec![millis_of("2026-03-29T07:00:00Z").expect("t"), millis_of("2026-03-30T07:00:00Z").expect("t")]
        );
        let winter = daily.next_after(millis_of("2026-01-10T12:00:00Z").expect("t"));
        assert_eq!(winter, millis_of("2026-01-11T08:00:00Z"));
    }

    #[test]
    fn due_occurrences_are_those_passed_since() {
        let hourly = schedule("0 * * * *", "UTC").expect("schedule");
        let from = millis_of("2026-01-01T00:30:00Z").expect("t");
        let to = millis_of("2026-01-01T03:00:00Z").expect("t");
        assert_eq!(hourly.due(from, to, 100).len(), 3);
        assert_eq!(hourly.due(from, to, 1), vec![to]);
        assert!(hourly.due(to, to, 100).is_empty());
    }
}
