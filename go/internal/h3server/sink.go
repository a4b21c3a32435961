package h3server

import (
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// The sink: where a background upload sends its bytes (quicbed.run.background).
// POST /sink reads the body and discards it, counting what arrived; a sampler logs
// the count every SinkInterval on this machine's clock, so the runner reads an
// upload's goodput over any span from the receiver's side, as a download's is read
// from its client's samples.

// SinkPath is the sink's path.
const SinkPath = "/sink"

type sink struct {
	got  atomic.Int64
	stop chan struct{}
	done chan struct{}
}

// sinkHandler answers POST /sink and passes every other request to next.
func (s *Server) sinkHandler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != SinkPath {
			next.ServeHTTP(w, r)
			return
		}
		if r.Method != http.MethodPost {
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		start := time.Now()
		n, err := io.Copy(io.Discard, countingReader{r.Body, &s.sink.got})
		if err != nil {
			s.logRequest(r, 499, n, time.Since(start))
			return
		}
		w.WriteHeader(http.StatusOK)
		s.logRequest(r, http.StatusOK, n, time.Since(start))
	})
}

type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countingReader) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	c.n.Add(int64(k))
	return k, err
}

// sample logs the bytes the sink has received every interval until stopped.
func (s *Server) sample(interval time.Duration) {
	defer close(s.sink.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case now := <-t.C:
			s.log.Log("sink_sample", map[string]any{"unix_ns": now.UnixNano(), "bytes": s.sink.got.Load()})
		case <-s.sink.stop:
			return
		}
	}
}
