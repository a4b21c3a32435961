//! What a request gets: the file under the document root and the response headers,
//! the same as quicbed-h3server's handler (go/internal/h3server/handler.go).

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// Sent with every response, as by the Apache arm and quicbed-h3server.
pub const CACHE_CONTROL: &str = "no-store, no-cache";

/// Apache's defaults for the files quicbed generates (text/html without a charset:
/// Apache's AddDefaultCharset is off); anything else is application/octet-stream.
pub fn content_type(path: &Path) -> &'static str {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(|e| e.to_ascii_lowercase());
    match ext.as_deref() {
        Some("html") => "text/html",
        Some("jpg") | Some("jpeg") => "image/jpeg",
        Some("json") => "application/json",
        _ => "application/octet-stream",
    }
}

/// Percent-decodes a URL path (as Go's url.URL.Path is); None if malformed or not UTF-8.
pub fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3)?;
            let v = u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Go's path.Clean("/" + p): a rooted path without ".", ".." or empty elements;
/// ".." above the root stays at the root.
pub fn clean(p: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    format!("/{}", parts.join("/"))
}

/// The document tree, resolved once (symlinks included) so that every file served
/// is proven to lie inside it.
pub struct Docroot {
    root: PathBuf,
}

impl Docroot {
    pub fn new(root: &Path) -> std::io::Result<Docroot> {
        Ok(Docroot {
            root: std::fs::canonicalize(root)?,
        })
    }

    /// The regular file a decoded URL path names, or None (404): a directory means
    /// its index.html; a path or symlink that leads out of the tree is refused.
    pub fn resolve(&self, url_path: &str) -> Option<PathBuf> {
        let clean = clean(url_path);
        let mut p = self.root.join(clean.trim_start_matches('/'));
        if p.is_dir() {
            p.push("index.html");
        }
        let real = std::fs::canonicalize(&p).ok()?;
        if !real.starts_with(&self.root) {
            return None;
        }
        let meta = std::fs::metadata(&real).ok()?;
        meta.is_file().then_some(real)
    }
}

/// Days since 1970-01-01 to a civil (year, month, day), proleptic Gregorian
/// (Howard Hinnant's days_from_civil inverse).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

fn split(t: SystemTime) -> (i64, u32, u32, u64, u32) {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (y, m, day) = civil((secs / 86_400) as i64);
    (y, m, day, secs % 86_400, d.subsec_nanos())
}

/// An HTTP date (Go's http.TimeFormat): `Mon, 02 Jan 2006 15:04:05 GMT`.
pub fn http_date(t: SystemTime) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let (y, m, d, s, _) = split(t);
    let secs = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    let wd = DAYS[((secs / 86_400) % 7) as usize];
    format!(
        "{wd}, {d:02} {} {y:04} {:02}:{:02}:{:02} GMT",
        MONTHS[(m - 1) as usize],
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// RFC 3339 in UTC with nanoseconds, trailing zeros trimmed (Go's RFC3339Nano).
pub fn rfc3339(t: SystemTime) -> String {
    let (y, m, d, s, ns) = split(t);
    let mut frac = if ns == 0 {
        String::new()
    } else {
        format!(".{ns:09}")
    };
    while frac.ends_with('0') {
        frac.pop();
    }
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}{frac}Z",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn dates() {
        let t = UNIX_EPOCH + Duration::new(1_136_214_245, 120_000_000);
        assert_eq!(http_date(t), "Mon, 02 Jan 2006 15:04:05 GMT");
        assert_eq!(rfc3339(t), "2006-01-02T15:04:05.12Z");
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(http_date(leap), "Tue, 29 Feb 2000 00:00:00 GMT");
    }

    #[test]
    fn paths() {
        assert_eq!(clean("/../../etc/passwd"), "/etc/passwd");
        assert_eq!(clean("/a/./b/../c/"), "/a/c");
        assert_eq!(clean(""), "/");
        assert_eq!(percent_decode("/a%2e%2E/b").as_deref(), Some("/a../b"));
        assert_eq!(percent_decode("/a%2"), None);
        assert_eq!(content_type(Path::new("x/IMG.JPG")), "image/jpeg");
        assert_eq!(
            content_type(Path::new("x/a.css")),
            "application/octet-stream"
        );
    }
}
