//! The event loop: one UDP socket, every connection in one thread, quiche's timers
//! and pacing hints honoured, one log line per event as it happens.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Read};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use quiche::h3::NameValue;
use serde_json::json;

use crate::config::Config;
use crate::files::{self, Docroot, CACHE_CONTROL};
use crate::log::{ms, Logger};

/// Largest UDP payload we send (quiche's examples and Chromium's default; quiche's own
/// default is 1200). No path MTU discovery: see README.
pub const MAX_SEND_UDP_PAYLOAD: usize = 1350;

/// A packet whose pacing time is at most this far ahead is sent now (quic-go's
/// pacer works at the same 1 ms granularity).
const PACING_GRANULARITY: Duration = Duration::from_millis(1);

/// How long in-flight responses may still finish after SIGTERM/SIGINT, then how long
/// the CONNECTION_CLOSE frames get to leave.
const STOP_GRACE: Duration = Duration::from_millis(1000);
const STOP_CLOSE: Duration = Duration::from_millis(300);

/// H3_NO_ERROR, the application close code of a graceful stop.
const H3_NO_ERROR: u64 = 0x100;
const H3_INTERNAL_ERROR: u64 = 0x102;

/// BoringSSL's ssl_early_data_accepted (include/openssl/ssl.h, enum
/// ssl_early_data_reason_t): the server accepted the client's 0-RTT data.
const SSL_EARLY_DATA_ACCEPTED: u32 = 2;

/// BoringSSL's names for ssl_early_data_reason_t, for the log.
fn early_data_reason_name(r: u32) -> &'static str {
    match r {
        0 => "unknown",
        1 => "disabled",
        2 => "accepted",
        3 => "protocol_version",
        4 => "peer_declined",
        5 => "no_session_offered",
        6 => "session_not_resumed",
        7 => "unsupported_for_session",
        8 => "hello_retry_request",
        9 => "alpn_mismatch",
        10 => "channel_id",
        12 => "ticket_age_skew",
        13 => "quic_parameter_mismatch",
        14 => "alps_mismatch",
        _ => "other",
    }
}

struct Response {
    headers: Option<Vec<quiche::h3::Header>>,
    body: Vec<u8>,
    written: usize,
    started: Instant,
    method: String,
    path: String,
    status: u16,
    early_data: bool,
}

struct Client {
    id: u64,
    conn: quiche::Connection,
    h3: Option<quiche::h3::Connection>,
    remote: SocketAddr,
    accepted: Instant,
    established: bool,
    closing: bool,
    responses: HashMap<u64, Response>,
    /// A packet waiting for its pacing time.
    held: Option<(Vec<u8>, quiche::SendInfo)>,
    cids: Vec<Vec<u8>>,
}

pub struct Server {
    cfg: Config,
    socket: UdpSocket,
    local: SocketAddr,
    quic: quiche::Config,
    h3: quiche::h3::Config,
    docroot: Docroot,
    log: Logger,
    clients: HashMap<u64, Client>,
    cids: HashMap<Vec<u8>, u64>,
    next_id: u64,
    urandom: File,
    cc_algorithm: quiche::CongestionControlAlgorithm,
}

/// The quiche configuration: IETF QUIC v1, TLS 1.3 (the only TLS QUIC has), ALPN h3,
/// 0-RTT, and quicbed-h3server's flow-control and stream limits.
fn quic_config(cfg: &Config) -> Result<quiche::Config, String> {
    for (flag, path) in [("--cert", &cfg.cert), ("--key", &cfg.key)] {
        std::fs::File::open(path)
            .map_err(|e| format!("{flag} {:?}: {e}", path.display().to_string()))?;
    }
    let mut q = quiche::Config::new(quiche::PROTOCOL_VERSION).map_err(|e| e.to_string())?;
    q.load_cert_chain_from_pem_file(&cfg.cert.to_string_lossy())
        .map_err(|e| {
            format!(
                "--cert {:?}: not a PEM certificate chain ({e})",
                cfg.cert.display().to_string()
            )
        })?;
    q.load_priv_key_from_pem_file(&cfg.key.to_string_lossy())
        .map_err(|e| {
            format!(
                "--key {:?}: not a PEM private key for it ({e})",
                cfg.key.display().to_string()
            )
        })?;
    q.set_application_protos(quiche::h3::APPLICATION_PROTOCOL)
        .map_err(|e| e.to_string())?;
    q.enable_early_data();
    q.set_max_idle_timeout(cfg.idle_timeout.as_millis() as u64);
    q.set_max_send_udp_payload_size(MAX_SEND_UDP_PAYLOAD);
    let (bidi_local, bidi_remote, uni) = cfg.stream_data();
    let (max_stream, max_conn) = cfg.max_windows();
    q.set_initial_max_data(cfg.initial_conn_window);
    q.set_max_connection_window(max_conn);
    q.set_initial_max_stream_data_bidi_local(bidi_local);
    q.set_initial_max_stream_data_bidi_remote(bidi_remote);
    q.set_initial_max_stream_data_uni(uni);
    q.set_max_stream_window(max_stream);
    q.set_initial_max_streams_bidi(cfg.max_incoming_streams);
    q.set_initial_max_streams_uni(cfg.max_incoming_uni_streams);
    q.set_max_recv_udp_payload_size(cfg.max_udp_payload_size as usize);
    q.set_max_ack_delay(cfg.max_ack_delay);
    q.set_ack_delay_exponent(cfg.ack_delay_exponent);
    q.set_active_connection_id_limit(cfg.active_connection_id_limit);
    q.set_disable_active_migration(true);
    q.set_initial_congestion_window_packets(cfg.initial_cwnd_packets);
    q.set_cc_algorithm_name(&cfg.cc)
        .map_err(|_| format!("--cc {:?}: not offered by quiche", cfg.cc))?;
    set_groups(&mut q, cfg)?;
    Ok(q)
}

/// `--groups`: the key-exchange groups BoringSSL accepts (`SSL_CTX_set1_groups_list`);
/// not given, BoringSSL's default stays (X25519MLKEM768, X25519, P-256, P-384 in
/// boring-sys 5.4.0). The list is a set, not an order: without
/// SSL_OP_CIPHER_SERVER_PREFERENCE (quiche's Config cannot set it) BoringSSL's server
/// takes the client's most preferred group that the list holds, with a
/// HelloRetryRequest when the client sent no key share for it.
fn set_groups(q: &mut quiche::Config, cfg: &Config) -> Result<(), String> {
    if let Some(list) = cfg.curves_list() {
        q.set_curves_list(&list).map_err(|e| {
            format!(
                "--groups {:?}: BoringSSL refused the group list {list:?} ({e})",
                cfg.groups_names()
            )
        })?;
    }
    Ok(())
}

/// Stops the loop on SIGTERM and SIGINT (set by the signal handler).
pub static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// SIGTERM and SIGINT set [`STOP`]; without SA_RESTART, so a waiting ppoll returns.
pub fn install_signal_handlers() {
    // SAFETY: a plain sigaction with a handler that only stores an atomic.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as *const () as libc::sighandler_t;
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_flags = 0;
        libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut());
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
    }
}

impl Server {
    /// Binds, loads the certificate, and logs the start line.
    pub fn start(cfg: Config, mut log: Logger) -> Result<Server, String> {
        let quic = quic_config(&cfg)?;
        let h3 = quiche::h3::Config::new().map_err(|e| e.to_string())?;
        let docroot =
            Docroot::new(&cfg.docroot).map_err(|e| format!("--docroot {:?}: {e}", cfg.docroot))?;
        if let Some(d) = &cfg.qlog_dir {
            std::fs::create_dir_all(d).map_err(|e| format!("--qlog-dir {d:?}: {e}"))?;
        }
        let socket = UdpSocket::bind(cfg.addr).map_err(|e| format!("--addr {}: {e}", cfg.addr))?;
        socket.set_nonblocking(true).map_err(|e| e.to_string())?;
        let local = socket.local_addr().map_err(|e| e.to_string())?;
        let urandom = File::open("/dev/urandom").map_err(|e| format!("/dev/urandom: {e}"))?;
        let algo: quiche::CongestionControlAlgorithm = cfg.cc.parse().unwrap();
        let mut start = json!({
            "addr": local.to_string(),
            "docroot": cfg.docroot.display().to_string(),
            "config": cfg.to_json(),
            "quiche_version": env!("QUICBED_QUICHE_VERSION"),
            "server_version": env!("CARGO_PKG_VERSION"),
            "cc": cfg.cc,
            "cc_algorithm": format!("{algo:?}"),
            "pid": std::process::id(),
        });
        let rustc = env!("QUICBED_RUSTC_VERSION");
        if !rustc.is_empty() {
            start["rustc_version"] = json!(rustc);
        }
        log.log("start", start);
        Ok(Server {
            cfg,
            socket,
            local,
            quic,
            h3,
            docroot,
            log,
            clients: HashMap::new(),
            cids: HashMap::new(),
            next_id: 1,
            urandom,
            cc_algorithm: algo,
        })
    }

    /// Serves until [`STOP`] is set, then stops gracefully (bounded) and logs "stop".
    pub fn run(&mut self) {
        let mut buf = vec![0u8; 65_535];
        let mut out = vec![0u8; MAX_SEND_UDP_PAYLOAD];
        let mut stopping: Option<Instant> = None;
        loop {
            let now = Instant::now();
            if stopping.is_none() && STOP.load(Ordering::SeqCst) {
                stopping = Some(now + STOP_GRACE);
            }
            if let Some(deadline) = stopping {
                for c in self.clients.values_mut() {
                    if !c.closing && (c.responses.is_empty() || now >= deadline) {
                        let _ = c.conn.close(true, H3_NO_ERROR, b"server stopping");
                        c.closing = true;
                    }
                }
                let quiet = self
                    .clients
                    .values()
                    .all(|c| c.conn.is_closed() || (c.conn.is_draining() && c.held.is_none()));
                if quiet || now >= deadline + STOP_CLOSE {
                    break;
                }
            }

            self.wait(stopping.is_some());

            loop {
                match self.socket.recv_from(&mut buf) {
                    Ok((n, from)) => self.on_packet(&mut buf[..n], from, stopping.is_some()),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => break,
                    // e.g. ICMP port unreachable reported on the socket: nothing to do
                    Err(_) => break,
                }
            }

            let now = Instant::now();
            for c in self.clients.values_mut() {
                if c.conn.timeout_instant().is_some_and(|t| t <= now) {
                    c.conn.on_timeout();
                }
            }
            let ids: Vec<u64> = self.clients.keys().copied().collect();
            for id in &ids {
                self.serve(*id);
            }
            for c in self.clients.values_mut() {
                flush(c, &self.socket, &mut out);
            }
            self.collect();
        }
        let ids: Vec<u64> = self.clients.keys().copied().collect();
        for id in ids {
            if let Some(c) = self.clients.remove(&id) {
                self.log_close(c);
            }
        }
        self.log.log("stop", json!({}));
    }

    /// Waits for a packet, the next timer or pacing time, or a signal.
    fn wait(&self, stopping: bool) {
        let now = Instant::now();
        let mut until = now + Duration::from_millis(if stopping { 10 } else { 500 });
        for c in self.clients.values() {
            if let Some(t) = c.conn.timeout_instant() {
                until = until.min(t);
            }
            if let Some((_, info)) = &c.held {
                until = until.min(info.at.checked_sub(PACING_GRANULARITY).unwrap_or(now));
            }
        }
        let wait = until.saturating_duration_since(now);
        let ts = libc::timespec {
            tv_sec: wait.as_secs() as libc::time_t,
            tv_nsec: wait.subsec_nanos() as libc::c_long,
        };
        let mut pfd = libc::pollfd {
            fd: self.socket.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, a valid timespec, no signal mask change.
        unsafe {
            libc::ppoll(&mut pfd, 1, &ts, std::ptr::null());
        }
    }

    fn random_cid(&mut self) -> Vec<u8> {
        let mut cid = vec![0u8; quiche::MAX_CONN_ID_LEN];
        self.urandom
            .read_exact(&mut cid)
            .expect("reading /dev/urandom");
        cid
    }

    fn on_packet(&mut self, pkt: &mut [u8], from: SocketAddr, refuse_new: bool) {
        let hdr = match quiche::Header::from_slice(pkt, quiche::MAX_CONN_ID_LEN) {
            Ok(h) => h,
            Err(_) => return,
        };
        let id = match self.cids.get(hdr.dcid.as_ref()) {
            Some(id) => *id,
            None => {
                if hdr.ty != quiche::Type::Initial || refuse_new {
                    return;
                }
                if !quiche::version_is_supported(hdr.version) {
                    let mut out = [0u8; 1350];
                    if let Ok(n) = quiche::negotiate_version(&hdr.scid, &hdr.dcid, &mut out) {
                        let _ = self.socket.send_to(&out[..n], from);
                    }
                    return;
                }
                let odcid = hdr.dcid.to_vec();
                let scid = self.random_cid();
                let cid = quiche::ConnectionId::from_ref(&scid);
                // No Retry (as quic-go by default): it would cost a round trip.
                let mut conn = match quiche::accept(&cid, None, self.local, from, &mut self.quic) {
                    Ok(c) => c,
                    Err(_) => return,
                };
                if let Some(dir) = &self.cfg.qlog_dir {
                    set_qlog(&mut conn, dir, &odcid, from);
                }
                let id = self.next_id;
                self.next_id += 1;
                self.cids.insert(scid.clone(), id);
                self.cids.insert(odcid.clone(), id);
                self.clients.insert(
                    id,
                    Client {
                        id,
                        conn,
                        h3: None,
                        remote: from,
                        accepted: Instant::now(),
                        established: false,
                        closing: false,
                        responses: HashMap::new(),
                        held: None,
                        cids: vec![scid, odcid],
                    },
                );
                id
            }
        };
        if let Some(c) = self.clients.get_mut(&id) {
            let info = quiche::RecvInfo {
                from,
                to: self.local,
            };
            // A packet quiche cannot use is dropped; quiche closes the connection
            // itself where the error calls for it.
            let _ = c.conn.recv(pkt, info);
        }
    }

    /// The HTTP/3 side of one connection: the conn line once established, requests,
    /// and responses that were waiting for flow control.
    fn serve(&mut self, id: u64) {
        let Some(c) = self.clients.get_mut(&id) else {
            return;
        };
        if !c.established && c.conn.is_established() {
            c.established = true;
            let reason = c.conn.early_data_reason();
            let alpn = String::from_utf8_lossy(c.conn.application_proto()).into_owned();
            // quiche has no getter for a connection's algorithm; what it does say
            // (gcongestion, i.e. BBRv2, or not) must agree with the one configured.
            let gcongestion = c.conn.gcongestion_enabled();
            let want_gcongestion =
                self.cc_algorithm == quiche::CongestionControlAlgorithm::Bbr2Gcongestion;
            let cc = if gcongestion == Some(want_gcongestion) {
                self.cfg.cc.clone()
            } else {
                "inconsistent".to_string()
            };
            self.log.log(
                "conn",
                json!({
                    "conn_id": c.id,
                    "remote": c.remote.to_string(),
                    "handshake_ms": ms(c.accepted.elapsed()),
                    "used_0rtt": reason == SSL_EARLY_DATA_ACCEPTED,
                    "early_data_reason": early_data_reason_name(reason),
                    "did_resume": c.conn.is_resumed(),
                    // quiche speaks only QUIC v1 (quiche::PROTOCOL_VERSION), and QUIC
                    // always runs TLS 1.3 (RFC 9001).
                    "quic_version": if quiche::PROTOCOL_VERSION == 1 { "v1".to_string() } else { format!("{:#x}", quiche::PROTOCOL_VERSION) },
                    "alpn": alpn,
                    "tls_version": "TLS 1.3",
                    "cc": cc,
                    "cc_gcongestion": gcongestion,
                    // what each side advertised (RFC 9000's and qlog's names): the
                    // server's from the Config it set, the client's as quiche decoded
                    // it from the client's handshake
                    "tp_local": self.cfg.transport_params(),
                    "tp_remote": c.conn.peer_transport_params().map(peer_params),
                    "flow_control_autotune": self.cfg.flow_control_autotune,
                }),
            );
        }
        if c.h3.is_none() && !c.closing && (c.conn.is_established() || c.conn.is_in_early_data()) {
            match quiche::h3::Connection::with_transport(&mut c.conn, &self.h3) {
                Ok(h) => c.h3 = Some(h),
                Err(_) => {
                    let _ = c
                        .conn
                        .close(true, H3_INTERNAL_ERROR, b"cannot start HTTP/3");
                    return;
                }
            }
        }
        let Some(h3) = c.h3.as_mut() else {
            return;
        };
        for sid in c.conn.writable() {
            if c.responses.contains_key(&sid) {
                continue_response(&mut c.conn, h3, &mut c.responses, sid, c.id, &mut self.log);
            }
        }
        loop {
            match h3.poll(&mut c.conn) {
                Ok((sid, quiche::h3::Event::Headers { list, .. })) => {
                    let resp = respond(&self.docroot, &list, c.conn.is_in_early_data());
                    c.responses.insert(sid, resp);
                    continue_response(&mut c.conn, h3, &mut c.responses, sid, c.id, &mut self.log);
                }
                Ok((sid, quiche::h3::Event::Data)) => {
                    // A GET has no body; anything sent anyway is read and dropped.
                    let mut sink = [0u8; 4096];
                    while h3.recv_body(&mut c.conn, sid, &mut sink).is_ok() {}
                }
                Ok((sid, quiche::h3::Event::Reset(_))) => {
                    c.responses.remove(&sid);
                }
                Ok(_) => {}
                Err(quiche::h3::Error::Done) => break,
                Err(_) => {
                    let _ = c.conn.close(true, H3_INTERNAL_ERROR, b"HTTP/3 error");
                    break;
                }
            }
        }
    }

    /// Removes closed connections, logging each.
    fn collect(&mut self) {
        let closed: Vec<u64> = self
            .clients
            .iter()
            .filter(|(_, c)| c.conn.is_closed())
            .map(|(id, _)| *id)
            .collect();
        for id in closed {
            if let Some(c) = self.clients.remove(&id) {
                self.log_close(c);
            }
        }
    }

    fn log_close(&mut self, c: Client) {
        for cid in &c.cids {
            self.cids.remove(cid);
        }
        if !c.established {
            self.log.log(
                "conn_failed",
                json!({
                    "conn_id": c.id,
                    "remote": c.remote.to_string(),
                    "error": close_reason(&c.conn),
                }),
            );
            return;
        }
        let s = c.conn.stats();
        let mut stats = json!({
            "sent": s.sent,
            "recv": s.recv,
            "lost": s.lost,
            "spurious_lost": s.spurious_lost,
            "retrans": s.retrans,
            "sent_bytes": s.sent_bytes,
            "recv_bytes": s.recv_bytes,
            "lost_bytes": s.lost_bytes,
            "stream_retrans_bytes": s.stream_retrans_bytes,
            "cc": self.cfg.cc,
        });
        if let Some(p) = c.conn.path_stats().next() {
            stats["cwnd"] = json!(p.cwnd);
            stats["rtt_ms"] = json!(ms(p.rtt));
            if let Some(m) = p.min_rtt {
                stats["min_rtt_ms"] = json!(ms(m));
            }
            stats["pto_count"] = json!(p.total_pto_count);
        }
        let rec = json!({
            "conn_id": c.id,
            "duration_ms": ms(c.accepted.elapsed()),
            "reason": close_reason(&c.conn),
            "cc": self.cfg.cc,
            "stats": stats,
        });
        self.log.log("conn_close", rec);
    }
}

/// The client's transport parameters as quiche decoded them, by qlog's names (as
/// quiche's own qlog event `transport:parameters_set` names them).
fn peer_params(tp: &quiche::TransportParams) -> serde_json::Value {
    json!({
        "max_idle_timeout": tp.max_idle_timeout,
        "max_udp_payload_size": tp.max_udp_payload_size,
        "initial_max_data": tp.initial_max_data,
        "initial_max_stream_data_bidi_local": tp.initial_max_stream_data_bidi_local,
        "initial_max_stream_data_bidi_remote": tp.initial_max_stream_data_bidi_remote,
        "initial_max_stream_data_uni": tp.initial_max_stream_data_uni,
        "initial_max_streams_bidi": tp.initial_max_streams_bidi,
        "initial_max_streams_uni": tp.initial_max_streams_uni,
        "ack_delay_exponent": tp.ack_delay_exponent,
        "max_ack_delay": tp.max_ack_delay,
        "active_connection_id_limit": tp.active_conn_id_limit,
        "disable_active_migration": tp.disable_active_migration,
        "max_datagram_frame_size": tp.max_datagram_frame_size,
    })
}

fn close_reason(conn: &quiche::Connection) -> String {
    let err = |who: &str, e: &quiche::ConnectionError| {
        format!(
            "{who} closed with {} error {:#x}{}",
            if e.is_app { "application" } else { "transport" },
            e.error_code,
            if e.reason.is_empty() {
                String::new()
            } else {
                format!(" ({})", String::from_utf8_lossy(&e.reason))
            }
        )
    };
    if conn.is_timed_out() {
        "idle timeout".into()
    } else if let Some(e) = conn.peer_error() {
        err("peer", e)
    } else if let Some(e) = conn.local_error() {
        err("server", e)
    } else {
        "closed".into()
    }
}

/// One JSON-SEQ qlog per connection, named as quic-go names its own:
/// `<original destination connection ID>_server.sqlog`. Its description names the
/// client's address (`peer=IP:PORT`): quiche's qlog logs no `connection_started`, and
/// quicbed tells the flows of a compete cell apart by their client ports.
fn set_qlog(
    conn: &mut quiche::Connection,
    dir: &std::path::Path,
    odcid: &[u8],
    peer: std::net::SocketAddr,
) {
    let name: String = odcid.iter().map(|b| format!("{b:02x}")).collect();
    let path: PathBuf = dir.join(format!("{name}_server.sqlog"));
    if let Ok(f) = File::create(&path) {
        conn.set_qlog(
            Box::new(BufWriter::new(f)),
            "quicbed-quiche-server".into(),
            format!("quicbed-quiche-server odcid={name} peer={peer}"),
        );
    }
}

/// The response to one request (quicbed-h3server's handler.go, rule by rule).
fn respond(docroot: &Docroot, request: &[quiche::h3::Header], early_data: bool) -> Response {
    let mut method = String::new();
    let mut raw_path = String::new();
    for h in request {
        match h.name() {
            b":method" => method = String::from_utf8_lossy(h.value()).into_owned(),
            b":path" => raw_path = String::from_utf8_lossy(h.value()).into_owned(),
            _ => {}
        }
    }
    let without_query = raw_path.split(['?', '#']).next().unwrap_or("");
    let decoded = files::percent_decode(without_query);
    let path = decoded.clone().unwrap_or_else(|| without_query.to_string());
    let date = files::http_date(SystemTime::now());
    let hdr = |n: &str, v: &str| quiche::h3::Header::new(n.as_bytes(), v.as_bytes());
    let mut resp = Response {
        headers: None,
        body: Vec::new(),
        written: 0,
        started: Instant::now(),
        method: method.clone(),
        path,
        status: 404,
        early_data,
    };
    let empty = |status: u16, extra: Option<(&str, &str)>| {
        let mut h = vec![hdr(":status", &status.to_string())];
        if let Some((n, v)) = extra {
            h.push(hdr(n, v));
        }
        h.push(hdr("cache-control", CACHE_CONTROL));
        h.push(hdr("date", &date));
        h.push(hdr("content-length", "0"));
        h
    };
    if method != "GET" && method != "HEAD" {
        resp.status = 405;
        resp.headers = Some(empty(405, Some(("allow", "GET, HEAD"))));
        return resp;
    }
    let file = decoded.and_then(|p| docroot.resolve(&p));
    let body = file.as_ref().and_then(|f| std::fs::read(f).ok());
    let (Some(file), Some(body)) = (file, body) else {
        resp.headers = Some(empty(404, None));
        return resp;
    };
    resp.status = 200;
    resp.headers = Some(vec![
        hdr(":status", "200"),
        hdr("content-type", files::content_type(&file)),
        hdr("content-length", &body.len().to_string()),
        hdr("cache-control", CACHE_CONTROL),
        hdr("date", &date),
    ]);
    if method == "GET" {
        resp.body = body;
    }
    resp
}

/// Hands as much of a response to quiche as flow control allows; logs the request
/// line once the last byte is handed over.
fn continue_response(
    conn: &mut quiche::Connection,
    h3: &mut quiche::h3::Connection,
    responses: &mut HashMap<u64, Response>,
    sid: u64,
    conn_id: u64,
    log: &mut Logger,
) {
    let Some(r) = responses.get_mut(&sid) else {
        return;
    };
    if let Some(headers) = r.headers.take() {
        match h3.send_response(conn, sid, &headers, r.body.is_empty()) {
            Ok(()) => {}
            Err(quiche::h3::Error::StreamBlocked) => {
                r.headers = Some(headers);
                return;
            }
            Err(_) => {
                responses.remove(&sid);
                return;
            }
        }
    }
    while r.written < r.body.len() {
        match h3.send_body(conn, sid, &r.body[r.written..], true) {
            Ok(n) if n > 0 => r.written += n,
            Ok(_) | Err(quiche::h3::Error::Done) => return,
            Err(_) => {
                responses.remove(&sid);
                return;
            }
        }
    }
    let r = responses.remove(&sid).unwrap();
    log.log(
        "request",
        json!({
            "conn_id": conn_id,
            "method": r.method,
            "path": r.path,
            "status": r.status,
            "bytes": r.written,
            "duration_ms": ms(r.started.elapsed()),
            "proto": "HTTP/3.0",
            "early_data": r.early_data,
        }),
    );
}

/// Sends what the connection has to send, each packet at its pacing time (a packet
/// due later is held, and the loop wakes for it).
fn flush(c: &mut Client, socket: &UdpSocket, out: &mut [u8]) {
    let now = Instant::now();
    loop {
        if let Some((pkt, info)) = &c.held {
            if info.at > now + PACING_GRANULARITY {
                return;
            }
            match socket.send_to(pkt, info.to) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                _ => c.held = None,
            }
        }
        let (n, info) = match c.conn.send(out) {
            Ok(v) => v,
            Err(quiche::Error::Done) => return,
            Err(_) => {
                let _ = c.conn.close(false, 0x1, b"send failed");
                return;
            }
        };
        if info.at > now + PACING_GRANULARITY {
            c.held = Some((out[..n].to_vec(), info));
            return;
        }
        if let Err(e) = socket.send_to(&out[..n], info.to) {
            if e.kind() == std::io::ErrorKind::WouldBlock {
                // the socket buffer is full: keep the packet for the next round
                c.held = Some((out[..n].to_vec(), info));
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str, path: &str) -> Vec<quiche::h3::Header> {
        vec![
            quiche::h3::Header::new(b":method", method.as_bytes()),
            quiche::h3::Header::new(b":path", path.as_bytes()),
        ]
    }

    fn names(r: &Response) -> Vec<String> {
        let h = r.headers.as_ref().unwrap();
        h.iter()
            .map(|h| String::from_utf8_lossy(h.name()).into_owned())
            .collect()
    }

    fn value(r: &Response, name: &str) -> String {
        let h = r.headers.as_ref().unwrap();
        let h = h.iter().find(|h| h.name() == name.as_bytes()).unwrap();
        String::from_utf8_lossy(h.value()).into_owned()
    }

    #[test]
    fn head_post_and_refusals() {
        let dir = std::env::temp_dir().join(format!("quiche-server-test-{}", std::process::id()));
        let www = dir.join("www");
        std::fs::create_dir_all(www.join("5kb")).unwrap();
        std::fs::write(www.join("5kb/index.html"), b"<html></html>").unwrap();
        std::fs::write(www.join("5kb/img-000.jpg"), vec![7u8; 6000]).unwrap();
        std::fs::write(dir.join("secret"), b"x").unwrap();
        let _ = std::os::unix::fs::symlink(dir.join("secret"), www.join("escape"));
        let root = Docroot::new(&www).unwrap();

        let head = respond(&root, &request("HEAD", "/5kb/img-000.jpg"), false);
        assert_eq!((head.status, head.body.len()), (200, 0));
        assert_eq!(value(&head, "content-length"), "6000");
        assert_eq!(value(&head, "content-type"), "image/jpeg");
        assert_eq!(
            names(&head),
            [
                ":status",
                "content-type",
                "content-length",
                "cache-control",
                "date"
            ]
        );

        let get = respond(&root, &request("GET", "/5kb/"), false);
        assert_eq!(get.status, 200);
        assert_eq!(get.body, b"<html></html>");
        assert_eq!(value(&get, "content-type"), "text/html");

        let post = respond(&root, &request("POST", "/5kb/img-000.jpg"), false);
        assert_eq!(post.status, 405);
        assert_eq!(value(&post, "allow"), "GET, HEAD");
        assert_eq!(value(&post, "content-length"), "0");

        for p in [
            "/nothing",
            "/../secret",
            "/%2e%2e/secret",
            "/escape",
            "/5kb/%zz",
            "/5kb/img-000.jpg/x",
        ] {
            let r = respond(&root, &request("GET", p), false);
            assert_eq!(r.status, 404, "{p}");
            assert_eq!(
                names(&r),
                [":status", "cache-control", "date", "content-length"]
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn boringssl_knows_every_group() {
        use crate::config::{Group, GROUPS};
        let mut q = quiche::Config::new(quiche::PROTOCOL_VERSION).unwrap();
        let mut cfg = Config::default();
        set_groups(&mut q, &cfg).unwrap(); // not given: nothing set
        for g in GROUPS {
            cfg.groups = vec![*g];
            set_groups(&mut q, &cfg).unwrap();
        }
        cfg.groups = GROUPS.to_vec();
        set_groups(&mut q, &cfg).unwrap();
        // what BoringSSL's refusal says (validate refuses these first)
        let x448 = Group {
            name: "x448",
            boringssl: "X448",
            iana: 30,
        };
        cfg.groups = vec![GROUPS[0], x448];
        let e = set_groups(&mut q, &cfg).unwrap_err();
        assert!(
            e.starts_with(
                "--groups \"x25519,x448\": BoringSSL refused the group list \"X25519:X448\""
            ),
            "{e}"
        );
        cfg.groups = vec![GROUPS[0], GROUPS[0]];
        assert!(set_groups(&mut q, &cfg).is_err());
    }
}
