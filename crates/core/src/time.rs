//! RFC 3339 timestamps (UTC, second precision) and kubectl's human durations.

use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch, now.
pub fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Seconds since the epoch as RFC 3339 UTC (`2026-11-22T02:14:15Z`).
pub fn rfc3339(secs: i64) -> String {
    let mut out = Vec::with_capacity(20);
    push_rfc3339(&mut out, secs, None);
    String::from_utf8(out).unwrap_or_default()
}

/// Appends seconds since the epoch as RFC 3339 UTC; with `micros`, six fractional digits
/// (Kubernetes' `MicroTime`: `2026-11-22T02:14:15.000123Z`).
pub fn push_rfc3339(out: &mut Vec<u8>, secs: i64, micros: Option<u32>) {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's civil-from-days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    push_digits(out, y, 4);
    out.push(b'-');
    push_digits(out, m, 2);
    out.push(b'-');
    push_digits(out, d, 2);
    out.push(b'T');
    push_digits(out, rem / 3600, 2);
    out.push(b':');
    push_digits(out, rem % 3600 / 60, 2);
    out.push(b':');
    push_digits(out, rem % 60, 2);
    if let Some(us) = micros {
        out.push(b'.');
        push_digits(out, i64::from(us), 6);
    }
    out.push(b'Z');
}

/// Appends the last `n` (≤ 6) decimal digits of `v`, zero-padded.
fn push_digits(out: &mut Vec<u8>, v: i64, n: usize) {
    let mut buf = [b'0'; 6];
    let mut v = v.unsigned_abs();
    for slot in buf[..n].iter_mut().rev() {
        *slot = b'0' + (v % 10) as u8;
        v /= 10;
    }
    out.extend_from_slice(&buf[..n]);
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)` into seconds since the epoch.
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d, h, mi, se) = (
        num(0..4)?,
        num(5..7)?,
        num(8..10)?,
        num(11..13)?,
        num(14..16)?,
        num(17..19)?,
    );
    let mut i = 19;
    if b.get(i) == Some(&b'.') {
        i += 1;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
    }
    let offset = match b.get(i)? {
        b'Z' | b'z' => 0,
        sign @ (b'+' | b'-') => {
            let v = num(i + 1..i + 3)? * 3600 + num(i + 4..i + 6)? * 60;
            if *sign == b'+' { v } else { -v }
        }
        _ => return None,
    };
    Some(days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + se - offset)
}

/// Go's duration syntax (`1h2m3.5s`, `300ms`) → nanoseconds.
pub fn parse_go_duration(s: &str) -> Option<i64> {
    let (neg, mut rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s),
    };
    if rest == "0" {
        return Some(0);
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let n = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let value: f64 = rest[..n].parse().ok()?;
        rest = &rest[n..];
        let u = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..u] {
            "ns" => 1.0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        total += value * scale;
        rest = &rest[u..];
    }
    let total = total.round() as i64;
    Some(if neg { -total } else { total })
}

/// kubectl's `HumanDuration` (`35s`, `5m3s`, `3h`, `2d4h`, `3y`).
pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    if secs < 0 {
        return "0s".into();
    }
    if secs < 120 {
        return format!("{secs}s");
    }
    let minutes = secs / 60;
    if minutes < 10 {
        return two_units(minutes, "m", secs % 60, "s");
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = secs / 3600;
    if hours < 8 {
        return two_units(hours, "h", minutes % 60, "m");
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    let days = hours / 24;
    if hours < 24 * 8 {
        return two_units(days, "d", hours % 24, "h");
    }
    if hours < 24 * 365 * 2 {
        return format!("{days}d");
    }
    if hours < 24 * 365 * 8 {
        return two_units(days / 365, "y", days % 365, "d");
    }
    format!("{}y", days / 365)
}

/// `n` of `unit`, then `rest` of the smaller `rest_unit` unless it is zero (`5m3s`, `3h`).
fn two_units(n: i64, unit: &str, rest: i64, rest_unit: &str) -> String {
    if rest == 0 {
        format!("{n}{unit}")
    } else {
        format!("{n}{unit}{rest}{rest_unit}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse_go_duration("1h2m3.5s"), Some(3_723_500_000_000));
        assert_eq!(parse_go_duration("300ms"), Some(300_000_000));
        assert_eq!(parse_go_duration("0s"), Some(0));
        assert_eq!(parse_go_duration("x"), None);
    }
    #[test]
    fn round_trips_and_durations() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_795_313_655), "2026-11-22T02:14:15Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(parse_rfc3339("2026-11-22T02:14:15Z"), Some(1_795_313_655));
        assert_eq!(
            parse_rfc3339("2026-11-22T03:14:15.5+01:00"),
            Some(1_795_313_655)
        );
        assert_eq!(parse_rfc3339("nope"), None);
        assert_eq!(human_duration(35), "35s");
        assert_eq!(human_duration(303), "5m3s");
        assert_eq!(human_duration(600), "10m");
        assert_eq!(human_duration(3 * 3600 + 60), "3h1m");
        assert_eq!(human_duration(50 * 3600), "2d2h");
        assert_eq!(human_duration(-5), "<invalid>");
    }
}
