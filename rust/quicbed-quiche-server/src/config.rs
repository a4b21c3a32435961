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

/// A TLS 1.3 key-exchange group `--groups` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Group {
    /// quicbed's name (lower case), as quicbed-h3server's `-groups` takes it.
    pub name: &'static str,
    /// BoringSSL's, for `SSL_CTX_set1_groups_list` (quiche's `Config::set_curves_list`;
    /// boring-sys 5.4.0's `ssl/ssl_key_share.cc`, `kNamedGroups`).
    pub boringssl: &'static str,
    /// The IANA TLS Supported Groups number, as quicbed-h3server logs it.
    pub iana: u16,
}

/// The groups `--groups` takes, in the order usage and errors list them.
pub const GROUPS: &[Group] = &[
    Group {
        name: "x25519",
        boringssl: "X25519",
        iana: 29,
    },
    Group {
        name: "secp256r1",
        boringssl: "P-256",
        iana: 23,
    },
    Group {
        name: "x25519mlkem768",
        boringssl: "X25519MLKEM768",
        iana: 4588,
    },
];

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
    /// Initial stream receive window, bytes (default 512 KiB, as quic-go): the three
    /// initial_max_stream_data limits, unless one of the three below is given.
    pub initial_stream_window: u64,
    /// Per-kind overrides of the initial stream window (RFC 9000's three limits).
    pub initial_max_stream_data_bidi_local: Option<u64>,
    pub initial_max_stream_data_bidi_remote: Option<u64>,
    pub initial_max_stream_data_uni: Option<u64>,
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
    /// Largest UDP payload the server accepts, advertised as max_udp_payload_size
    /// (default quiche's 65527; RFC 9000: 1200..65527).
    pub max_udp_payload_size: u64,
    /// The longest the server delays an ACK, ms, advertised as max_ack_delay (default
    /// quiche's 25; RFC 9000: below 2^14).
    pub max_ack_delay: u64,
    /// ack_delay_exponent (default quiche's 3; RFC 9000: at most 20).
    pub ack_delay_exponent: u64,
    /// active_connection_id_limit (default quiche's 2; RFC 9000: at least 2).
    pub active_connection_id_limit: u64,
    /// Grow the receive windows up to their maxima as the application reads (quiche's
    /// auto-tuning, default); false: each maximum is its initial window.
    pub flow_control_autotune: bool,
    /// Congestion control, one of [`CC_NAMES`] (default cubic).
    pub cc: String,
    /// TLS key-exchange groups the server accepts, from [`GROUPS`], in the order given
    /// (empty: not given, BoringSSL's default list).
    pub groups: Vec<Group>,
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
            max_udp_payload_size: 65527,
            max_ack_delay: 25,
            ack_delay_exponent: 3,
            active_connection_id_limit: 2,
            flow_control_autotune: true,
            initial_max_stream_data_bidi_local: None,
            initial_max_stream_data_bidi_remote: None,
            initial_max_stream_data_uni: None,
            cc: DEFAULT_CC.to_string(),
            groups: Vec::new(),
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
  --groups LIST                   TLS key-exchange groups accepted, comma-separated, of
                                  x25519, secp256r1, x25519mlkem768 (default BoringSSL's);
                                  the client's order picks among them: one name pins one
  --initial-stream-window BYTES   default 524288
  --max-stream-window BYTES       default 6291456
  --initial-conn-window BYTES     default 524288
  --max-conn-window BYTES         default 15728640
  --max-incoming-streams N        default 100
  --max-incoming-uni-streams N    default 100
  --idle-timeout DURATION         e.g. 30s, 500ms (default 30s)
  --initial-cwnd-packets N        default 10
  --initial-max-stream-data-bidi-local BYTES, --initial-max-stream-data-bidi-remote BYTES,
  --initial-max-stream-data-uni BYTES
                                  one stream-data limit each (default the stream window)
  --max-udp-payload-size BYTES    1200..65527 (default 65527)
  --max-ack-delay MS              0..16383 (default 25)
  --ack-delay-exponent N          0..20 (default 3)
  --active-connection-id-limit N  at least 2 (default 2)
  --flow-control-autotune BOOL    true or false (default true)
";

/// What went wrong on the command line (exit status 2).
#[derive(Debug)]
pub struct UsageError(pub String);

/// `--help` was asked for.
pub const HELP: &str = "help";

/// `--groups`: quicbed's comma-separated group names (any case, spaces around a name
/// ignored), in the order given, from [`GROUPS`]. An empty or unknown name is refused,
/// naming it and the groups; so is a group named twice, which BoringSSL would refuse.
pub fn parse_groups(v: &str) -> Result<Vec<Group>, UsageError> {
    let allowed = || {
        let names: Vec<&str> = GROUPS.iter().map(|g| g.name).collect();
        names.join(", ")
    };
    let mut groups: Vec<Group> = Vec::new();
    for elem in v.split(',') {
        let name = elem.trim();
        if name.is_empty() {
            return Err(UsageError(format!(
                "--groups {v:?}: an empty group name (the groups: {})",
                allowed()
            )));
        }
        let Some(g) = GROUPS.iter().find(|g| g.name.eq_ignore_ascii_case(name)) else {
            return Err(UsageError(format!(
                "--groups {v:?}: unknown group {name:?} (the groups: {})",
                allowed()
            )));
        };
        if groups.contains(g) {
            return Err(UsageError(format!(
                "--groups {v:?}: group {:?} given twice",
                g.name
            )));
        }
        groups.push(*g);
    }
    Ok(groups)
}

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
                "--groups",
                "--initial-stream-window",
                "--max-stream-window",
                "--initial-conn-window",
                "--max-conn-window",
                "--max-incoming-streams",
                "--max-incoming-uni-streams",
                "--idle-timeout",
                "--initial-cwnd-packets",
                "--initial-max-stream-data-bidi-local",
                "--initial-max-stream-data-bidi-remote",
                "--initial-max-stream-data-uni",
                "--max-udp-payload-size",
                "--max-ack-delay",
                "--ack-delay-exponent",
                "--active-connection-id-limit",
                "--flow-control-autotune",
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
                "--groups" => c.groups = parse_groups(&v)?,
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
                "--initial-max-stream-data-bidi-local" => {
                    c.initial_max_stream_data_bidi_local = Some(number(&flag, &v)?)
                }
                "--initial-max-stream-data-bidi-remote" => {
                    c.initial_max_stream_data_bidi_remote = Some(number(&flag, &v)?)
                }
                "--initial-max-stream-data-uni" => {
                    c.initial_max_stream_data_uni = Some(number(&flag, &v)?)
                }
                "--max-udp-payload-size" => c.max_udp_payload_size = number(&flag, &v)?,
                "--max-ack-delay" => c.max_ack_delay = number(&flag, &v)?,
                "--ack-delay-exponent" => c.ack_delay_exponent = number(&flag, &v)?,
                "--active-connection-id-limit" => c.active_connection_id_limit = number(&flag, &v)?,
                "--flow-control-autotune" => {
                    c.flow_control_autotune = match v.as_str() {
                        "true" => true,
                        "false" => false,
                        _ => return Err(UsageError(format!("{flag} {v:?}: not true or false"))),
                    }
                }
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
        for (i, g) in self.groups.iter().enumerate() {
            if !GROUPS.contains(g) || self.groups[..i].contains(g) {
                return Err(UsageError(format!(
                    "--groups: group {:?} is unknown or given twice",
                    g.name
                )));
            }
        }
        if self.initial_cwnd_packets == 0 {
            return Err(UsageError(
                "--initial-cwnd-packets 0: must be at least 1".into(),
            ));
        }
        // RFC 9000's ranges (section 18.2); quiche would clamp or ignore what lies outside
        let ranges: [(&str, u64, u64, u64); 4] = [
            (
                "--max-udp-payload-size",
                self.max_udp_payload_size,
                1200,
                65527,
            ),
            ("--max-ack-delay", self.max_ack_delay, 0, (1 << 14) - 1),
            ("--ack-delay-exponent", self.ack_delay_exponent, 0, 20),
            (
                "--active-connection-id-limit",
                self.active_connection_id_limit,
                2,
                (1 << 62) - 1,
            ),
        ];
        for (flag, v, lo, hi) in ranges {
            if v < lo || v > hi {
                return Err(UsageError(format!(
                    "{flag} {v}: RFC 9000 allows {lo}..{hi}"
                )));
            }
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
            "initial_max_stream_data_bidi_local": self.initial_max_stream_data_bidi_local,
            "initial_max_stream_data_bidi_remote": self.initial_max_stream_data_bidi_remote,
            "initial_max_stream_data_uni": self.initial_max_stream_data_uni,
            "max_udp_payload_size": self.max_udp_payload_size,
            "max_ack_delay": self.max_ack_delay,
            "ack_delay_exponent": self.ack_delay_exponent,
            "active_connection_id_limit": self.active_connection_id_limit,
            "flow_control_autotune": self.flow_control_autotune,
            "cc": self.cc,
            "groups": self.groups_json(),
        })
    }

    /// `--groups` as quicbed-h3server logs its `-groups`: IANA numbers in the order
    /// given, null when not given.
    fn groups_json(&self) -> Value {
        if self.groups.is_empty() {
            return Value::Null;
        }
        self.groups.iter().map(|g| g.iana).collect()
    }

    /// `--groups` as quicbed names them, comma-separated, for messages.
    pub fn groups_names(&self) -> String {
        let names: Vec<&str> = self.groups.iter().map(|g| g.name).collect();
        names.join(",")
    }

    /// `--groups` as BoringSSL's colon-separated list for
    /// `quiche::Config::set_curves_list` (None: not given, BoringSSL's default).
    pub fn curves_list(&self) -> Option<String> {
        if self.groups.is_empty() {
            return None;
        }
        let ssl: Vec<&str> = self.groups.iter().map(|g| g.boringssl).collect();
        Some(ssl.join(":"))
    }

    /// The three stream-data limits the server advertises: bidi_local, bidi_remote, uni.
    pub fn stream_data(&self) -> (u64, u64, u64) {
        let w = self.initial_stream_window;
        (
            self.initial_max_stream_data_bidi_local.unwrap_or(w),
            self.initial_max_stream_data_bidi_remote.unwrap_or(w),
            self.initial_max_stream_data_uni.unwrap_or(w),
        )
    }

    /// The largest stream and connection windows quiche may grow to: at least the
    /// initial ones (quiche would shrink a window above its maximum when it first
    /// tunes it), and the initial ones themselves without auto-tuning.
    pub fn max_windows(&self) -> (u64, u64) {
        let (l, r, u) = self.stream_data();
        let stream = l.max(r).max(u);
        if self.flow_control_autotune {
            (
                self.max_stream_window.max(stream),
                self.max_conn_window.max(self.initial_conn_window),
            )
        } else {
            (stream, self.initial_conn_window)
        }
    }

    /// The transport parameters the server sets on quiche's Config, by RFC 9000's
    /// (and qlog's) names: what quiche 0.30.0 encodes into every handshake (its
    /// setters change a value only above 2^62 - 1 or, for
    /// active_connection_id_limit, below 2, which validate refuses).
    pub fn transport_params(&self) -> Value {
        let (l, r, u) = self.stream_data();
        json!({
            "max_idle_timeout": self.idle_timeout.as_millis() as u64,
            "max_udp_payload_size": self.max_udp_payload_size,
            "initial_max_data": self.initial_conn_window,
            "initial_max_stream_data_bidi_local": l,
            "initial_max_stream_data_bidi_remote": r,
            "initial_max_stream_data_uni": u,
            "initial_max_streams_bidi": self.max_incoming_streams,
            "initial_max_streams_uni": self.max_incoming_uni_streams,
            "ack_delay_exponent": self.ack_delay_exponent,
            "max_ack_delay": self.max_ack_delay,
            "active_connection_id_limit": self.active_connection_id_limit,
            "disable_active_migration": true,
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
    fn transport_parameters_from_the_flags() {
        let d = std::env::temp_dir();
        let d = d.display();
        let c = Config::from_args(args(&format!(
            "--docroot {d} --cert c --key k --initial-conn-window 65536 \
             --initial-max-stream-data-uni 1000 --max-udp-payload-size 1300 \
             --max-ack-delay 10 --ack-delay-exponent 5 --active-connection-id-limit 3 \
             --flow-control-autotune false --idle-timeout 12s"
        )))
        .unwrap();
        let tp = c.transport_params();
        assert_eq!(tp["initial_max_data"], 65536);
        assert_eq!(tp["initial_max_stream_data_bidi_local"], 524288);
        assert_eq!(tp["initial_max_stream_data_uni"], 1000);
        assert_eq!(tp["max_udp_payload_size"], 1300);
        assert_eq!(tp["max_ack_delay"], 10);
        assert_eq!(tp["ack_delay_exponent"], 5);
        assert_eq!(tp["active_connection_id_limit"], 3);
        assert_eq!(tp["max_idle_timeout"], 12000);
        assert_eq!(c.max_windows(), (524288, 65536)); // no auto-tuning: the initial ones
        let c = Config::from_args(args(&format!(
            "--docroot {d} --cert c --key k --initial-conn-window 20000000"
        )))
        .unwrap();
        assert_eq!(c.max_windows(), (6 * 1024 * 1024, 20000000)); // at least the initial
        for (flag, msg) in [
            (
                "--max-udp-payload-size 1199",
                "--max-udp-payload-size 1199: RFC 9000 allows 1200..65527",
            ),
            (
                "--max-ack-delay 16384",
                "--max-ack-delay 16384: RFC 9000 allows 0..16383",
            ),
            (
                "--ack-delay-exponent 21",
                "--ack-delay-exponent 21: RFC 9000 allows 0..20",
            ),
            (
                "--active-connection-id-limit 1",
                "--active-connection-id-limit 1: RFC 9000",
            ),
            (
                "--flow-control-autotune maybe",
                "--flow-control-autotune \"maybe\"",
            ),
        ] {
            let e = Config::from_args(args(&format!("--docroot {d} --cert c --key k {flag}")))
                .unwrap_err();
            assert!(e.0.contains(msg), "{}", e.0);
        }
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

    #[test]
    fn groups_as_boringssl_names_them() {
        let d = std::env::temp_dir();
        let d = d.display();
        let groups = |g: &str| {
            Config::from_args(args(&format!(
                "--docroot {d} --cert c --key k --groups {g}"
            )))
        };
        let c = Config::from_args(args(&format!("--docroot {d} --cert c --key k"))).unwrap();
        assert_eq!(c.curves_list(), None); // not given: BoringSSL's default
        assert_eq!(c.to_json()["groups"], Value::Null);
        let c = groups("x25519").unwrap();
        assert_eq!(c.curves_list().as_deref(), Some("X25519"));
        let c = groups("secp256r1,x25519mlkem768").unwrap();
        assert_eq!(c.curves_list().as_deref(), Some("P-256:X25519MLKEM768"));
        assert_eq!(c.to_json()["groups"], json!([23, 4588]));
        assert_eq!(c.groups_names(), "secp256r1,x25519mlkem768");
        let c = groups("X25519MLKEM768,X25519,SecP256r1").unwrap();
        assert_eq!(
            c.curves_list().as_deref(),
            Some("X25519MLKEM768:X25519:P-256")
        );
        assert_eq!(c.groups_names(), "x25519mlkem768,x25519,secp256r1");
        let c = Config::from_args(vec![
            format!("--docroot={d}"),
            "--cert=c".into(),
            "--key=k".into(),
            "--groups= secp256r1 , x25519".into(),
        ])
        .unwrap();
        assert_eq!(c.curves_list().as_deref(), Some("P-256:X25519"));
        for (g, msg) in [
            ("x448", "--groups \"x448\": unknown group \"x448\""),
            ("x25519,x448", "unknown group \"x448\""),
            ("P-256", "unknown group \"P-256\""),
            ("x25519,", "--groups \"x25519,\": an empty group name"),
            (",x25519", "an empty group name"),
            ("x25519,,secp256r1", "an empty group name"),
            ("x25519,X25519", "group \"x25519\" given twice"),
        ] {
            let e = groups(g).unwrap_err();
            assert!(e.0.contains(msg), "{g}: {}", e.0);
            if !msg.contains("twice") {
                assert!(
                    e.0.contains("(the groups: x25519, secp256r1, x25519mlkem768)"),
                    "{}",
                    e.0
                );
            }
        }
        let e = Config::from_args(vec![
            "--docroot".into(),
            d.to_string(),
            "--cert=c".into(),
            "--key=k".into(),
            "--groups".into(),
            String::new(),
        ])
        .unwrap_err();
        assert!(
            e.0.contains("--groups \"\": an empty group name"),
            "{}",
            e.0
        );
        let e = Config::from_args(args(&format!("--docroot {d} --cert c --key k --groups")))
            .unwrap_err();
        assert!(e.0.contains("--groups needs a value"), "{}", e.0);
        // that BoringSSL knows each name is checked in server.rs's tests
        for g in GROUPS {
            let c = groups(&g.name.to_ascii_uppercase()).unwrap();
            assert_eq!(c.curves_list().as_deref(), Some(g.boringssl));
            assert_eq!(c.to_json()["groups"], json!([g.iana]));
        }
        // a Config built in code is checked too
        let mut c = Config::from_args(args(&format!("--docroot {d} --cert c --key k"))).unwrap();
        c.groups = vec![GROUPS[0], GROUPS[0]];
        assert!(c.validate().unwrap_err().0.contains("given twice"));
    }
}
