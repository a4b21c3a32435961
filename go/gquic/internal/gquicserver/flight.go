package gquicserver

import (
	"strconv"
	"sync"
	"time"

	quic "github.com/lucas-clemente/quic-go"
)

// What a gQUIC load's sender ran under, logged so that a capped connection cannot
// pass for a protocol result (go/gquic/README.md, "Log").
//
// The windows: the client's hello gives the stream and connection flow-control
// windows (gQUIC's SFCW and CFCW) the server may fill before the client's first
// window update, and quic-go caps every congestion window at
// quic.QuicbedMaxCongestionWindow (1000 x 1460 bytes). The smallest of the three
// is the most the server could ever have in flight at first.
//
// The flight: what the server actually sent. A window or a pacing cap that holds
// the sender below the link shows as a small most-bytes-in-any-window-of-one-RTT;
// the server does not know the link's RTT, so it keeps the most bytes it sent to
// the client in any window of each of FlightWindowsMS, in BinMS bins, and the
// reader picks the window nearest the cell's RTT.

// FlightWindowsMS are the windows (ms) of the flight record, each a multiple of BinMS.
var FlightWindowsMS = []int{10, 20, 40, 80, 160}

// BinMS is the resolution of the flight record.
const BinMS = 2

// flight counts the bytes sent to one client in BinMS bins since its first datagram.
type flight struct {
	mu    sync.Mutex
	start time.Time
	bins  []int64
}

func (f *flight) add(now time.Time, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.start.IsZero() {
		f.start = now
	}
	i := int(now.Sub(f.start) / (BinMS * time.Millisecond))
	if i < 0 {
		i = 0
	}
	for len(f.bins) <= i {
		f.bins = append(f.bins, 0)
	}
	f.bins[i] += int64(n)
}

// peaks returns, for each of FlightWindowsMS, the most bytes sent in any window
// of that length (aligned to the bins) so far.
func (f *flight) peaks() map[string]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]int64, len(FlightWindowsMS))
	for _, w := range FlightWindowsMS {
		k := w / BinMS
		var sum, best int64
		for i, b := range f.bins {
			sum += b
			if i >= k {
				sum -= f.bins[i-k]
			}
			best = max(best, sum)
		}
		out[strconv.Itoa(w)] = best
	}
	return out
}

// windowFields are the conn record's window facts: the client's flow-control
// windows (read from quic-go's session, which parsed them from the client's hello;
// null if it cannot be asked), the congestion window's start and cap, the pacing
// step, and which of the windows is the smallest, with its size.
func windowFields(sess quic.Session) map[string]any {
	rec := map[string]any{
		"client_sfcw": nil, "client_cfcw": nil,
		"initial_cwnd_bytes":  quic.QuicbedInitialCongestionWindow,
		"max_cwnd_bytes":      quic.QuicbedMaxCongestionWindow,
		"pacing_min_delay_us": quic.QuicbedMinPacingDelay.Microseconds(),
		"window_limit":        "max_cwnd",
		"window_limit_bytes":  quic.QuicbedMaxCongestionWindow,
	}
	pw, ok := sess.(interface{ QuicbedPeerWindows() (uint64, uint64) })
	if !ok {
		return rec
	}
	sfcw, cfcw := pw.QuicbedPeerWindows()
	if sfcw == 0 || cfcw == 0 {
		return rec
	}
	rec["client_sfcw"], rec["client_cfcw"] = sfcw, cfcw
	limit, by := quic.QuicbedMaxCongestionWindow, "max_cwnd"
	if cfcw < limit {
		limit, by = cfcw, "connection_flow_control"
	}
	if sfcw < limit {
		limit, by = sfcw, "stream_flow_control"
	}
	rec["window_limit"], rec["window_limit_bytes"] = by, limit
	return rec
}
