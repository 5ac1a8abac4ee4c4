//! WAIT's `duration` and `until`, in Conductor's formats.

use chrono::{DateTime, NaiveDate, NaiveDateTime, TimeZone, Utc};

/// When a timer comes due: relative to when it is set, or at an absolute time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// This long after the decision is committed.
    After(chrono::Duration),
    /// At this time.
    At(DateTime<Utc>),
}

impl Due {
    /// The absolute time, given when the timer is set.
    pub fn at(self, now: DateTime<Utc>) -> DateTime<Utc> {
        match self {
            Due::After(d) => now + d,
            Due::At(t) => t,
        }
    }
}

/// Parses Conductor's WAIT `duration`: numbers with units, e.g. `30s`, `5 minutes`,
/// `1d 2h`, `2 days 3 hours 10 mins 5 secs`.
pub fn parse_duration(text: &str) -> Result<chrono::Duration, String> {
    let bad =
        || format!("duration {text:?} is not like \"30s\", \"5 minutes\" or \"1 days 2 hours\"");
    let mut total = chrono::Duration::zero();
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(bad());
        }
        let n: i64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = rest[digits..].trim_start();
        let unit_len = rest
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(rest.len());
        let unit = rest[..unit_len].to_ascii_lowercase();
        rest = rest[unit_len..].trim_start();
        let part = match unit.as_str() {
            "d" | "day" | "days" => chrono::Duration::try_days(n),
            "h" | "hr" | "hrs" | "hour" | "hours" => chrono::Duration::try_hours(n),
            "m" | "min" | "mins" | "minute" | "minutes" => chrono::Duration::try_minutes(n),
            "s" | "sec" | "secs" | "second" | "seconds" => chrono::Duration::try_seconds(n),
            _ => None,
        };
        total = total.checked_add(&part.ok_or_else(bad)?).ok_or_else(bad)?;
    }
    Ok(total)
}

/// Parses Conductor's WAIT `until`: `yyyy-MM-dd HH:mm`, `yyyy-MM-dd HH:mm z` (UTC/GMT or
/// an offset such as `+02:00`), `yyyy-MM-dd`, or RFC 3339. Without a zone, UTC.
pub fn parse_until(text: &str) -> Result<DateTime<Utc>, String> {
    let t = text.trim();
    if let Ok(at) = DateTime::parse_from_rfc3339(t) {
        return Ok(at.with_timezone(&Utc));
    }
    for suffix in [" UTC", " GMT", " Z"] {
        if let Some(local) = t.strip_suffix(suffix) {
            return parse_until(local);
        }
    }
    if let Ok(at) = DateTime::parse_from_str(t, "%Y-%m-%d %H:%M %:z") {
        return Ok(at.with_timezone(&Utc));
    }
    if let Ok(naive) = NaiveDateTime::parse_from_str(t, "%Y-%m-%d %H:%M") {
        return Ok(Utc.from_utc_datetime(&naive));
    }
    if let Ok(day) = NaiveDate::parse_from_str(t, "%Y-%m-%d") {
        if let Some(midnight) = day.and_hms_opt(0, 0, 0) {
            return Ok(Utc.from_utc_datetime(&midnight));
        }
    }
    Err(format!(
        "until {text:?} is not like \"2026-12-24 18:00\", \"2026-12-24 18:00 +01:00\" or RFC 3339"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_in_conductor_formats() {
        assert_eq!(
            parse_duration("30s").unwrap(),
            chrono::Duration::seconds(30)
        );
        assert_eq!(
            parse_duration("5 minutes").unwrap(),
            chrono::Duration::minutes(5)
        );
        assert_eq!(
            parse_duration("1 days 2 hours 3 mins 4 secs").unwrap(),
            chrono::Duration::seconds(86_400 + 7_200 + 180 + 4)
        );
        assert_eq!(parse_duration("1d2h").unwrap(), chrono::Duration::hours(26));
        for bad in ["", "soon", "5 fortnights", "m5", "99999999999999999999s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn until_in_conductor_formats() {
        let at = Utc.with_ymd_and_hms(2026, 12, 24, 18, 0, 0).unwrap();
        assert_eq!(parse_until("2026-12-24 18:00").unwrap(), at);
        assert_eq!(parse_until("2026-12-24 18:00 UTC").unwrap(), at);
        assert_eq!(parse_until("2026-12-24 19:00 +01:00").unwrap(), at);
        assert_eq!(parse_until("2026-12-24T18:00:00Z").unwrap(), at);
        assert!(parse_until("Christmas").is_err());
    }
}
