// Package qtp keeps what quic-go's qlog says of a connection's transport
// parameters: the transport:parameters_set event of each side, "local" (what
// this endpoint advertised, as quic-go marshals it into its handshake) and
// "remote" (what the peer advertised, as quic-go decoded it from the peer's
// handshake). quicbed's server and bulk client log both per connection, so
// that every load and flow can be checked against its arm's settings without
// reading a qlog file (those are complete only once the connection closes,
// and written only at a trace level that asks for them).
//
// A Record rides in the connection's context (WithRecord); Tracer wraps an
// optional file trace (the server's -qlog-dir) and copies the two events into
// the record. quic-go builds qlog events only while a trace is attached, so a
// connection with a Record costs the events' construction even without a
// file; only transport:parameters_set events are encoded.
package qtp

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/qlog"
	"github.com/quic-go/quic-go/qlogwriter"
	"github.com/quic-go/quic-go/qlogwriter/jsontext"
)

// Keys are the transport parameters a Record keeps, RFC 9000's names as
// quic-go's qlog spells them (connection IDs and the stateless reset token
// are left out: they identify the connection, not its settings). quic-go
// leaves out of its event a limit that is 0, and an idle timeout of 0 (none).
var Keys = []string{
	"max_idle_timeout", "max_udp_payload_size", "ack_delay_exponent", "max_ack_delay",
	"active_connection_id_limit", "initial_max_data", "initial_max_stream_data_bidi_local",
	"initial_max_stream_data_bidi_remote", "initial_max_stream_data_uni",
	"initial_max_streams_bidi", "initial_max_streams_uni", "max_datagram_frame_size",
	"disable_active_migration",
}

// Record holds one connection's two parameter sets (nil until seen).
type Record struct {
	mu            sync.Mutex
	local, remote map[string]any
}

// Sets returns copies of the local and the remote set (nil: not seen).
func (r *Record) Sets() (local, remote map[string]any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return clone(r.local), clone(r.remote)
}

func clone(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func (r *Record) set(ev qlog.ParametersSet) {
	var buf bytes.Buffer
	if err := ev.Encode(jsontext.NewEncoder(&buf), time.Time{}); err != nil {
		return
	}
	var data map[string]any
	d := json.NewDecoder(&buf)
	d.UseNumber() // integers as written, not float64
	if d.Decode(&data) != nil {
		return
	}
	kept := map[string]any{}
	for _, k := range Keys {
		if v, ok := data[k]; ok {
			kept[k] = v
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if ev.Initiator == qlog.InitiatorLocal {
		r.local = kept
	} else {
		r.remote = kept
	}
}

type recordKey struct{}

// WithRecord returns ctx carrying a new Record, and the Record.
func WithRecord(ctx context.Context) (context.Context, *Record) {
	r := &Record{}
	return context.WithValue(ctx, recordKey{}, r), r
}

// FromContext returns the Record ctx carries, or nil.
func FromContext(ctx context.Context) *Record {
	r, _ := ctx.Value(recordKey{}).(*Record)
	return r
}

// Tracer returns a quic.Config.Tracer that copies the parameter events into
// the Record of the connection's context, and passes every event on to the
// trace that file returns (file may be nil, or return nil: no file).
func Tracer(file func(context.Context, bool, quic.ConnectionID) qlogwriter.Trace) func(context.Context, bool, quic.ConnectionID) qlogwriter.Trace {
	return func(ctx context.Context, isClient bool, connID quic.ConnectionID) qlogwriter.Trace {
		var next qlogwriter.Trace
		if file != nil {
			next = file(ctx, isClient, connID)
		}
		rec := FromContext(ctx)
		if rec == nil {
			return next
		}
		return &trace{rec: rec, next: next}
	}
}

type trace struct {
	rec  *Record
	next qlogwriter.Trace
}

func (t *trace) AddProducer() qlogwriter.Recorder {
	r := &recorder{rec: t.rec}
	if t.next != nil {
		r.next = t.next.AddProducer()
	}
	return r
}

type recorder struct {
	rec  *Record
	next qlogwriter.Recorder
}

func (r *recorder) RecordEvent(ev qlogwriter.Event) {
	if p, ok := ev.(qlog.ParametersSet); ok {
		r.rec.set(p)
	}
	if r.next != nil {
		r.next.RecordEvent(ev)
	}
}

func (r *recorder) Close() error {
	if r.next != nil {
		return r.next.Close()
	}
	return nil
}
