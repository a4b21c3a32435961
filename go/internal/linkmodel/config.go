// Package linkmodel is the Dummynet pipe model of quicbed's link emulator: pure,
// deterministic and free of I/O, so that every property of the link can be tested
// exactly on a virtual clock.
//
// One Pipe models one direction, in Dummynet's order: random loss at entry, a
// bounded FIFO queue (tail drop), serialization at the rate, then propagation
// delay with optional jitter.
package linkmodel

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"
)

// ConfigFormat is the version of the config file this package reads.
const ConfigFormat = 1

// EthernetHeader is the number of bytes "ip" counting subtracts from a frame.
const EthernetHeader = 14

// DirectionConfig is one direction of the link as written by quicbed's Python side.
type DirectionConfig struct {
	// RateBps is the bottleneck rate in bit/s; 0 means unlimited (no queue, no serialization).
	RateBps uint64 `json:"rate_bps"`
	// DelayUs is the one-way propagation delay in microseconds.
	DelayUs int64 `json:"delay_us"`
	// JitterUs is the jitter in microseconds; 0 means none. For "reorder" and
	// "smooth" it is the +/- amplitude; for "step" the whole range (+/- JitterUs/2).
	JitterUs int64 `json:"jitter_us"`
	// JitterKind is "none", "reorder" (i.i.d. per packet, packets overtake),
	// "smooth" (a random delay curve, order kept) or "step" (the reference study's:
	// a level re-drawn every interval, decreases in two half-steps, packets overtake
	// only where the delay drops).
	JitterKind string `json:"jitter_kind"`
	// JitterIntervalUs is the time between the knots of the smooth delay curve, or
	// between the step kind's re-draws, in microseconds (> 0 for smooth, >= 1000 for
	// step).
	JitterIntervalUs int64 `json:"jitter_interval_us"`
	// Loss is the probability in [0, 1) that a packet is dropped at entry.
	Loss float64 `json:"loss"`
	// QueueBytes limits the FIFO in bytes (counted as Count says); 0 = not by bytes.
	QueueBytes int64 `json:"queue_bytes"`
	// QueuePackets limits the FIFO in packets; 0 = not by packets.
	QueuePackets int64 `json:"queue_packets"`
	// Count is "ethernet" (whole frame, header included, no FCS) or "ip" (frame
	// minus the 14-byte Ethernet header): the bytes that serialize and fill the queue.
	Count string `json:"count"`
	// ECNThresholdBytes: an ECN-capable packet that finds at least this many bytes
	// in the FIFO is marked CE instead of queued unmarked (counted as Count says);
	// 0 or absent = no marking.
	ECNThresholdBytes int64 `json:"ecn_threshold_bytes,omitempty"`
	// Capacity, when present, makes the link's capacity vary over time (rate_bps
	// must then be 0): a Mahimahi trace or a rate and delay schedule.
	Capacity *CapacityConfig `json:"capacity,omitempty"`
	// AddressDelayUs adds an extra one-way delay after the pipe for frames of these
	// server-side IPv4 addresses (AddressDelays: "down" by source, "up" by
	// destination), in microseconds; absent = none.
	AddressDelayUs map[string]int64 `json:"address_delay_us,omitempty"`
}

// Addresses is the direction's address-delay stage ("down" matches the source).
func (d DirectionConfig) Addresses(direction string) (*AddressDelays, error) {
	return NewAddressDelays(d.AddressDelayUs, direction == "down")
}

// CapacityConfig is a time-varying capacity as quicbed's Python side writes it.
type CapacityConfig struct {
	// Kind is "trace" (File, Sha256) or "schedule" (Steps).
	Kind string `json:"kind"`
	// File is a Mahimahi trace (ParseTrace); Sha256 its bytes' digest, checked, so
	// that the emulator runs the trace the cell's identity names.
	File   string `json:"file,omitempty"`
	Sha256 string `json:"sha256,omitempty"`
	// Data is File's bytes, read by ParseConfig's caller's reader: the model does
	// no I/O.
	Data []byte `json:"-"`
	// Steps is the schedule, repeated.
	Steps []StepConfig `json:"steps,omitempty"`
	// StartUs is where in the trace or schedule every restart begins (>= 0).
	StartUs int64 `json:"start_us,omitempty"`
}

// StepConfig is one step of a schedule.
type StepConfig struct {
	DurationUs int64  `json:"duration_us"`
	RateBps    uint64 `json:"rate_bps"`
	DelayUs    int64  `json:"delay_us"`
}

// build makes the Capacity the config describes, reading a trace's file.
func (c *CapacityConfig) build() (Capacity, error) {
	if c.StartUs < 0 {
		return nil, fmt.Errorf("capacity.start_us: must be >= 0 (got %d)", c.StartUs)
	}
	start := time.Duration(c.StartUs) * time.Microsecond
	switch c.Kind {
	case "trace":
		if c.File == "" || len(c.Steps) > 0 {
			return nil, fmt.Errorf("capacity: a trace has a file and no steps")
		}
		data := c.Data
		if data == nil {
			return nil, fmt.Errorf("capacity.file: %s was not read", c.File)
		}
		sum := sha256.Sum256(data)
		if got := hex.EncodeToString(sum[:]); got != c.Sha256 {
			return nil, fmt.Errorf("capacity.sha256: %s has digest %s, not %q", c.File, got, c.Sha256)
		}
		ms, err := ParseTrace(data)
		if err != nil {
			return nil, fmt.Errorf("capacity.file: %s: %v", c.File, err)
		}
		t, err := NewTrace(ms)
		if err != nil {
			return nil, err
		}
		t.StartAt(start)
		return t, nil
	case "schedule":
		if c.File != "" || len(c.Steps) == 0 {
			return nil, fmt.Errorf("capacity: a schedule has steps and no file")
		}
		steps := make([]Step, len(c.Steps))
		for i, st := range c.Steps {
			steps[i] = Step{Duration: time.Duration(st.DurationUs) * time.Microsecond,
				RateBps: st.RateBps, Delay: time.Duration(st.DelayUs) * time.Microsecond}
		}
		s, err := NewSchedule(steps)
		if err != nil {
			return nil, fmt.Errorf("capacity.steps: %v", err)
		}
		s.StartAt(start)
		return s, nil
	}
	return nil, fmt.Errorf("capacity.kind: unknown %q (trace or schedule)", c.Kind)
}

// Config is the whole emulator configuration (format 1).
type Config struct {
	Format int `json:"format"`
	// ServerIf is the bridge's interface towards the server: "down" frames enter here.
	ServerIf string `json:"server_if"`
	// ClientIf is the bridge's interface towards the client: "up" frames enter here.
	ClientIf string `json:"client_if"`
	// Seed seeds every random stream (per direction, per purpose).
	Seed       int64                      `json:"seed"`
	Directions map[string]DirectionConfig `json:"directions"`
}

// ParseConfig decodes and validates a config; every error names the key and value.
// “read“ reads the trace files it names (nil: a config that names none).
// ReadFile reads a file a config names (a trace): the caller's, as the model does no
// I/O (os.ReadFile in the emulator).
type ReadFile func(path string) ([]byte, error)

func ParseConfig(data []byte, read ReadFile) (*Config, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var c Config
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("config: %v", err)
	}
	for name, d := range c.Directions {
		if d.Capacity == nil || d.Capacity.Kind != "trace" || d.Capacity.File == "" {
			continue
		}
		if read == nil {
			return nil, fmt.Errorf("config: directions.%s.capacity.file: no reader for %s", name, d.Capacity.File)
		}
		b, err := read(d.Capacity.File)
		if err != nil {
			return nil, fmt.Errorf("config: directions.%s.capacity.file: %v", name, err)
		}
		d.Capacity.Data = b
	}
	if c.Format != ConfigFormat {
		return nil, fmt.Errorf("config: format %d is not supported (this emulator reads %d)", c.Format, ConfigFormat)
	}
	if c.ServerIf == "" || c.ClientIf == "" || c.ServerIf == c.ClientIf {
		return nil, fmt.Errorf("config: server_if %q and client_if %q must be two different interfaces", c.ServerIf, c.ClientIf)
	}
	for _, name := range []string{"down", "up"} {
		if _, ok := c.Directions[name]; !ok {
			return nil, fmt.Errorf("config: directions.%s is missing", name)
		}
	}
	for name, d := range c.Directions {
		if name != "down" && name != "up" {
			return nil, fmt.Errorf("config: unknown direction %q (down or up)", name)
		}
		if _, err := d.Params(); err != nil {
			return nil, fmt.Errorf("config: directions.%s.%v", name, err)
		}
		if _, err := d.Addresses(name); err != nil {
			return nil, fmt.Errorf("config: directions.%s.%v", name, err)
		}
	}
	return &c, nil
}

// Params validates a direction's configuration and converts it to model units.
func (d DirectionConfig) Params() (Params, error) {
	p := Params{
		RateBps:           d.RateBps,
		Delay:             time.Duration(d.DelayUs) * time.Microsecond,
		Jitter:            time.Duration(d.JitterUs) * time.Microsecond,
		JitterInterval:    time.Duration(d.JitterIntervalUs) * time.Microsecond,
		Loss:              d.Loss,
		QueueBytes:        d.QueueBytes,
		QueuePackets:      d.QueuePackets,
		ECNThresholdBytes: d.ECNThresholdBytes,
	}
	switch d.JitterKind {
	case "none", "":
		p.Kind = JitterNone
	case "reorder":
		p.Kind = JitterReorder
	case "smooth":
		p.Kind = JitterSmooth
	case "step":
		p.Kind = JitterStep
	default:
		return p, fmt.Errorf("jitter_kind: unknown %q (none, reorder, smooth or step)", d.JitterKind)
	}
	if d.Capacity != nil {
		c, err := d.Capacity.build()
		if err != nil {
			return p, err
		}
		p.Capacity = c
	}
	switch d.Count {
	case "ethernet", "":
	case "ip":
		p.CountIP = true
	default:
		return p, fmt.Errorf("count: unknown %q (ethernet or ip)", d.Count)
	}
	return p, p.Validate()
}
