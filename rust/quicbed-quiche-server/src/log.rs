//! The JSON-lines log: one object per event, written with one write(2) as the event
//! happens (no buffering), keys sorted as Go's encoding/json sorts a map's.

use std::fs::File;
use std::io::Write;
use std::time::SystemTime;

use serde_json::{Map, Value};

pub struct Logger {
    out: Box<dyn Write>,
}

impl Logger {
    /// Appends to `file`, or writes to stderr.
    pub fn open(file: Option<&std::path::Path>) -> std::io::Result<Logger> {
        let out: Box<dyn Write> = match file {
            Some(p) => Box::new(File::options().create(true).append(true).open(p)?),
            None => Box::new(std::io::stderr()),
        };
        Ok(Logger { out })
    }

    /// Writes `{"ts": ..., "event": event, ...fields}` and a newline.
    pub fn log(&mut self, event: &str, fields: Value) {
        let mut rec = match fields {
            Value::Object(m) => m,
            Value::Null => Map::new(),
            other => {
                let mut m = Map::new();
                m.insert("value".into(), other);
                m
            }
        };
        rec.insert(
            "ts".into(),
            Value::String(crate::files::rfc3339(SystemTime::now())),
        );
        rec.insert("event".into(), Value::String(event.into()));
        let mut line = serde_json::to_vec(&Value::Object(rec)).unwrap_or_default();
        line.push(b'\n');
        // One write_all of the whole line on an unbuffered file (O_APPEND): a reader
        // sees whole lines, at once. A failing log must not stop the server.
        let _ = self.out.write_all(&line);
        let _ = self.out.flush();
    }
}

/// Milliseconds with microsecond resolution, as quicbed-h3server logs durations.
pub fn ms(d: std::time::Duration) -> f64 {
    d.as_micros() as f64 / 1000.0
}
