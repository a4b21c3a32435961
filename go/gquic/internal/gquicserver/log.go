package gquicserver

import (
	"encoding/json"
	"io"
	"runtime/debug"
	"sync"
	"time"
)

// Logger writes one JSON object per line: the schema of quicbed's HTTP/3 servers
// (go/internal/h3server), which quicbed reads with one parser.
type Logger struct {
	mu sync.Mutex
	w  io.Writer
}

// NewLogger logs to w.
func NewLogger(w io.Writer) *Logger { return &Logger{w: w} }

// Log writes event with fields and a timestamp.
func (l *Logger) Log(event string, fields map[string]any) {
	rec := map[string]any{"ts": time.Now().UTC().Format(time.RFC3339Nano), "event": event}
	for k, v := range fields {
		rec[k] = v
	}
	b, _ := json.Marshal(rec)
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.w.Write(append(b, '\n'))
}

// QuicGoModule is the path of the quic-go module this server is built on.
const QuicGoModule = "github.com/lucas-clemente/quic-go"

// QuicGoVersion is the version of QuicGoModule compiled in, from the binary's
// build information ("v0.10.2"), and its replacement if the build replaced it
// ("" if not; quicbed's builds replace it with the patched copy that
// go/patches writes, a directory: "../../build/quic-go-v0.10.2-patched/quic-go-v0.10.2
// (devel)", as `go version -m` prints it); "unknown" if the binary has no build
// information (a test binary).
func QuicGoVersion() (version, replace string) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown", ""
	}
	for _, d := range bi.Deps {
		if d.Path == QuicGoModule {
			if r := d.Replace; r != nil {
				replace = r.Path + " " + r.Version
			}
			return d.Version, replace
		}
	}
	return "unknown", ""
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
