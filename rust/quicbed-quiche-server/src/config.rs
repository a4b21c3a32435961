//! The command line: every flag, its default and its unit, validated so that a bad
//! value is named the way the command line spells it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};

/// The congestion controls this quiche offers, exactly as
/// `quiche::CongestionControlAlgorithm::from_str` spells them (quiche 0.30.0:
/// `src/recovery/mod.rs`). `bbr`, `bbr2` and `bbr2_gcongestion` are three names
/// for one algorithm, quiche's BBRv2 port from Chromium's gcongestion.
pub const CC_NAMES: &[&str] = &["reno", "cubic", "bbr", "bbr2", "bbr2_gcongestion"];

/// The default, as for quicbed-h3server.
pub const DEFAULT_CC: &str = "cubic";

/// Everything the server is started with; logged whole in the start line.
#[derive(Debug, Clone)]
pub struct Config {
    /// UDP address to listen on (default `0.0.0.0:443`).
    pub addr: SocketAddr,
    /// The document tree (required).
    pub docroot: PathBuf,
    /// PEM certificate chain and private key (required; no fallback certificate).
    pub cert: PathBuf,
    pub key: PathBuf,
    /// JSON-lines log, appended (None: stderr).
    pub log: Option<PathBuf>,
    /// One qlog (JSON-SEQ) per connection in this directory (None: no qlog).
    pub qlog_dir: Option<PathBuf>,
    /// Initial stream receive window, bytes (default 512 KiB, as quic-go).
    pub initial_stream_window: u64,
    /// Largest stream receive window the auto-tuning may reach, bytes (default 6 MiB).
    pub max_stream_window: u64,
    /// Initial connection receive window, bytes (default 512 KiB, as quic-go).
    pub initial_conn_window: u64,
    /// Largest connection receive window, bytes (default 15 MiB, as quic-go).
    pub max_conn_window: u64,
    /// Bidirectional streams a client may open (default 100, as quic-go).
    pub max_incoming_streams: u64,
    /// Unidirectional streams a client may open (default 100, as quic-go).
    pub max_incoming_uni_streams: u64,
    /// Idle timeout (default 30 s, as quic-go).
    pub idle_timeout: Duration,
    /// Initial congestion window in packets (default 10, quiche's; quic-go starts at 32).
    pub initial_cwnd_packets: usize,
    /// Congestion control, one of [`CC_NAMES`] (default cubic).
    pub cc: String,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            addr: "0.0.0.0:443".parse().unwrap(),
            docroot: PathBuf::new(),
            cert: PathBuf::new(),
            key: PathBuf::new(),
            log: None,
            qlog_dir: None,
            initial_stream_window: 512 * 1024,
            max_stream_window: 6 * 1024 * 1024,
            initial_conn_window: 512 * 1024,
            max_conn_window: 15 * 1024 * 1024,
            max_incoming_streams: 100,
            max_incoming_uni_streams: 100,
            idle_timeout: Duration::from_secs(30),
            initial_cwnd_packets: 10,
            cc: DEFAULT_CC.to_string(),
        }
    }
}

pub const USAGE: &str = "\
usage: quicbed-quiche-server --docroot DIR --cert PEM --key PEM [options]

  --addr IP:PORT                  UDP address (default 0.0.0.0:443)
  --docroot DIR                   document tree (required)
  --cert PEM, --key PEM           certificate chain and private key (required)
  --log FILE                      JSON-lines log, appended (default stderr)
  --qlog-dir DIR                  one qlog per connection (default none)
  --cc NAME                       reno, cubic, bbr, bbr2, bbr2_gcongestion (default cubic)
  --initial-stream-window BYTES   default 524288
  --max-stream-window BYTES       default 6291456
  --initial-conn-window BYTES     default 524288
  --max-conn-window BYTES         default 15728640
  --max-incoming-streams N        default 100
  --max-incoming-uni-streams N    default 100
  --idle-timeout DURATION         e.g. 30s, 500ms (default 30s)
  --initial-cwnd-packets N        default 10
";

/// What went wrong on the command line (exit status 2).
#[derive(Debug)]
pub struct UsageError(pub String);

/// `--help` was asked for.
pub const HELP: &str = "help";

fn number<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, UsageError> {
    v.parse()
        .map_err(|_| UsageError(format!("{flag} {v:?}: not a non-negative integer")))
}

/// A Go-style duration: `30s`, `500ms`, `1m`, `1.5s`, `250us`; `0` alone is zero.
pub fn parse_duration(v: &str) -> Option<Duration> {
    if v == "0" {
        return Some(Duration::ZERO);
    }
    let split = v.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (num, unit) = v.split_at(split);
    let n: f64 = num.parse().ok()?;
    let secs = match unit {
        "ns" => n / 1e9,
        "us" | "µs" => n / 1e6,
        "ms" => n / 1e3,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return None,
    };
    Duration::try_from_secs_f64(secs).ok()
}

impl Config {
    /// Parses the arguments (without the program name). `Err(UsageError(HELP))`
    /// means `--help`.
    pub fn from_args<I: IntoIterator<Item = String>>(args: I) -> Result<Config, UsageError> {
        let mut c = Config::default();
        let mut it = args.into_iter();
        let mut seen_docroot = false;
        let mut seen_cert = false;
        let mut seen_key = false;
        while let Some(arg) = it.next() {
            if arg == "-h" || arg == "--help" {
                return Err(UsageError(HELP.into()));
            }
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
                _ => (arg.clone(), None),
            };
            if !flag.starts_with("--") {
                return Err(UsageError(format!("unexpected argument {arg:?}")));
            }
            let known = [
                "--addr",
                "--docroot",
                "--cert",
                "--key",
                "--log",
                "--qlog-dir",
                "--cc",
                "--initial-stream-window",
                "--max-stream-window",
                "--initial-conn-window",
                "--max-conn-window",
                "--max-incoming-streams",
                "--max-incoming-uni-streams",
                "--idle-timeout",
                "--initial-cwnd-packets",
            ];
            if !known.contains(&flag.as_str()) {
                return Err(UsageError(format!("unknown flag {flag} (see --help)")));
            }
            let v = match inline {
                Some(v) => v,
                None => it
                    .next()
                    .ok_or_else(|| UsageError(format!("{flag} needs a value")))?,
            };
            match flag.as_str() {
                "--addr" => {
                    c.addr = v
                        .parse()
                        .map_err(|_| UsageError(format!("--addr {v:?}: not an IP:PORT address")))?
                }
                "--docroot" => {
                    c.docroot = PathBuf::from(&v);
                    seen_docroot = !v.is_empty();
                }
                "--cert" => {
                    c.cert = PathBuf::from(&v);
                    seen_cert = !v.is_empty();
                }
                "--key" => {
                    c.key = PathBuf::from(&v);
                    seen_key = !v.is_empty();
                }
                "--log" => c.log = (!v.is_empty()).then(|| PathBuf::from(&v)),
                "--qlog-dir" => c.qlog_dir = (!v.is_empty()).then(|| PathBuf::from(&v)),
                "--cc" => c.cc = v,
                "--initial-stream-window" => c.initial_stream_window = number(&flag, &v)?,
                "--max-stream-window" => c.max_stream_window = number(&flag, &v)?,
                "--initial-conn-window" => c.initial_conn_window = number(&flag, &v)?,
                "--max-conn-window" => c.max_conn_window = number(&flag, &v)?,
                "--max-incoming-streams" => c.max_incoming_streams = number(&flag, &v)?,
                "--max-incoming-uni-streams" => c.max_incoming_uni_streams = number(&flag, &v)?,
                "--idle-timeout" => {
                    c.idle_timeout = parse_duration(&v).ok_or_else(|| {
                        UsageError(format!("--idle-timeout {v:?}: not a duration like 30s"))
                    })?
                }
                "--initial-cwnd-packets" => c.initial_cwnd_packets = number(&flag, &v)?,
                _ => unreachable!(),
            }
        }
        if !seen_docroot {
            return Err(UsageError("--docroot is required".into()));
        }
        if !seen_cert || !seen_key {
            return Err(UsageError(
                "--cert and --key are required (there is no fallback certificate)".into(),
            ));
        }
        c.validate()?;
        Ok(c)
    }

    /// Checks values whose validity does not depend on parsing alone.
    pub fn validate(&self) -> Result<(), UsageError> {
        if !CC_NAMES.contains(&self.cc.as_str()) {
            return Err(UsageError(format!(
                "--cc {:?}: congestion control not offered by quiche {} (it offers {})",
                self.cc,
                env!("QUICBED_QUICHE_VERSION"),
                CC_NAMES.join(", ")
            )));
        }
        if self.initial_stream_window > self.max_stream_window {
            return Err(UsageError(format!(
                "--initial-stream-window {} is larger than --max-stream-window {}",
                self.initial_stream_window, self.max_stream_window
            )));
        }
        if self.initial_conn_window > self.max_conn_window {
            return Err(UsageError(format!(
                "--initial-conn-window {} is larger than --max-conn-window {}",
                self.initial_conn_window, self.max_conn_window
            )));
        }
        if self.initial_cwnd_packets == 0 {
            return Err(UsageError(
                "--initial-cwnd-packets 0: must be at least 1".into(),
            ));
        }
        if self.idle_timeout.is_zero() {
            return Err(UsageError(
                "--idle-timeout 0: quiche would never time out idle connections".into(),
            ));
        }
        match std::fs::metadata(&self.docroot) {
            Ok(m) if m.is_dir() => Ok(()),
            _ => Err(UsageError(format!(
                "--docroot {:?} is not a readable directory",
                self.docroot.display().to_string()
            ))),
        }
    }

    /// The start line's `config`: every flag's effective value, with the keys
    /// quicbed-h3server uses where the meaning is the same (`idle_timeout` in
    /// nanoseconds, as Go's time.Duration is logged).
    pub fn to_json(&self) -> Value {
        let path = |p: &Option<PathBuf>| -> String {
            p.as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        };
        json!({
            "addr": self.addr.to_string(),
            "docroot": self.docroot.display().to_string(),
            "cert": self.cert.display().to_string(),
            "key": self.key.display().to_string(),
            "log": path(&self.log),
            "qlog_dir": path(&self.qlog_dir),
            "initial_stream_window": self.initial_stream_window,
            "max_stream_window": self.max_stream_window,
            "initial_conn_window": self.initial_conn_window,
            "max_conn_window": self.max_conn_window,
            "max_incoming_streams": self.max_incoming_streams,
            "max_incoming_uni_streams": self.max_incoming_uni_streams,
            "idle_timeout": self.idle_timeout.as_nanos() as u64,
            "initial_cwnd_packets": self.initial_cwnd_packets,
            "cc": self.cc,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("30"), None);
        assert_eq!(parse_duration("s"), None);
    }

    #[test]
    fn errors_name_the_value() {
        let dir = std::env::temp_dir();
        let d = dir.display();
        let e = Config::from_args(args(&format!("--docroot {d} --cert c --key k --cc bbr3")))
            .unwrap_err();
        assert!(e.0.contains("\"bbr3\""), "{}", e.0);
        let e = Config::from_args(args("--cert c --key k")).unwrap_err();
        assert!(e.0.contains("--docroot is required"), "{}", e.0);
        let e = Config::from_args(args(&format!("--docroot {d} --cert c --key k --addr x")))
            .unwrap_err();
        assert!(e.0.contains("--addr \"x\""), "{}", e.0);
        let e = Config::from_args(args(&format!("--docroot {d} --cert c --key k --nope 1")))
            .unwrap_err();
        assert!(e.0.contains("--nope"), "{}", e.0);
        for cc in CC_NAMES {
            let c = Config::from_args(args(&format!("--docroot {d} --cert c --key k --cc={cc}")))
                .unwrap();
            assert_eq!(&c.cc, cc);
            assert!(c.cc.parse::<quiche::CongestionControlAlgorithm>().is_ok());
        }
    }
}
