//! quicbed-quiche-server serves a document tree over HTTP/3 (IETF QUIC v1, TLS 1.3,
//! ALPN h3, 0-RTT accepted) with Cloudflare quiche, logging one JSON line per
//! connection and per request, as quicbed-h3server (quic-go) does. See README.md.

mod config;
mod files;
mod log;
mod server;

use std::process::ExitCode;

use config::{Config, HELP, USAGE};

fn main() -> ExitCode {
    let cfg = match Config::from_args(std::env::args().skip(1)) {
        Ok(c) => c,
        Err(e) if e.0 == HELP => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("quicbed-quiche-server: {}", e.0);
            return ExitCode::from(2);
        }
    };
    let logger = match log::Logger::open(cfg.log.as_deref()) {
        Ok(l) => l,
        Err(e) => {
            let p = cfg.log.as_ref().map(|p| p.display().to_string());
            eprintln!(
                "quicbed-quiche-server: --log {:?}: {e}",
                p.unwrap_or_default()
            );
            return ExitCode::from(2);
        }
    };
    server::install_signal_handlers();
    let mut srv = match server::Server::start(cfg, logger) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("quicbed-quiche-server: {e}");
            return ExitCode::from(1);
        }
    };
    srv.run();
    ExitCode::SUCCESS
}
