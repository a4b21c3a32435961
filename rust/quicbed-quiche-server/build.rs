//! Records, for the start line of the log, the quiche version that Cargo.lock pins
//! and the rustc that builds us.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=Cargo.lock");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=RUSTC");

    let lock = std::fs::read_to_string("Cargo.lock").unwrap_or_default();
    let mut quiche = String::from("unknown");
    let mut in_quiche = false;
    for line in lock.lines() {
        if line == "[[package]]" {
            in_quiche = false;
        } else if line == "name = \"quiche\"" {
            in_quiche = true;
        } else if in_quiche {
            if let Some(v) = line.strip_prefix("version = \"") {
                quiche = v.trim_end_matches('"').to_string();
                in_quiche = false;
            }
        }
    }
    println!("cargo:rustc-env=QUICBED_QUICHE_VERSION={quiche}");

    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    println!("cargo:rustc-env=QUICBED_RUSTC_VERSION={version}");
}
