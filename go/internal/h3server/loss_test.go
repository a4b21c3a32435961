package h3server

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	proxy "github.com/quic-go/quic-go/integrationtests/tools/proxy"
)

// Through a real connection: the proxy delays every packet by 10 ms (a 20 ms
// RTT) and one of the server's by 15 ms more, so later packets overtake it
// and the server declares it lost, then the client acknowledges it: a
// spurious loss. (Without the base delay the loopback's RTT is so short that
// quic-go forgets a lost packet, 3 PTOs after, before its late ACK comes.) With adaptive loss
// detection (quic-go's own) the server switches its packet threshold off
// (qlog: recovery_parameters_set with reordering_threshold "disabled"); with
// rfc9002 it keeps 3 and 9/8 RTT, and still logs the spurious loss. The
// setting is read back into the start and conn records.
func TestLossDetectionAsConfigured(t *testing.T) {
	restoreCC(t)
	certPath, keyPath, pool := certFiles(t)
	dir := tree(t)
	must(t, os.WriteFile(filepath.Join(dir, "big.bin"), bytes.Repeat([]byte("quicbed "), 1<<17), 0o644)) // 1 MiB
	for _, ld := range []string{quic.LossDetectionAdaptive, quic.LossDetectionRFC9002} {
		cfg := Config{Addr: "127.0.0.1:0", Docroot: dir, Cert: certPath, Key: keyPath, CC: "cubic",
			CubicN: 1, CubicBeta: 0.7, LossDetection: ld, QlogDir: filepath.Join(t.TempDir(), "qlog")}
		logBuf := &safeBuffer{mu: make(chanMutex, 1)}
		srv, err := Start(cfg, NewLogger(logBuf))
		must(t, err)
		if got := quic.LossDetection(); got != ld {
			t.Errorf("-loss-detection %s: quic-go runs %s", ld, got)
		}
		udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		must(t, err)
		var shortHeader atomic.Int32
		px := &proxy.Proxy{Conn: udp, ServerAddr: srv.Addr().(*net.UDPAddr),
			DelayPacket: func(d proxy.Direction, _, _ net.Addr, b []byte) time.Duration {
				if d == proxy.DirectionOutgoing && b[0]&0x80 == 0 && shortHeader.Add(1) == 100 {
					return 25 * time.Millisecond
				}
				return 10 * time.Millisecond
			}}
		must(t, px.Start())
		n := get(t, &tls.Config{RootCAs: pool, ServerName: "localhost"}, px.LocalAddr(), "/big.bin")
		_ = px.Close()
		waitFor(t, logBuf, "conn", 1)
		srv.Stop(time.Second)
		if n != 1<<20 {
			t.Fatalf("-loss-detection %s: got %d bytes", ld, n)
		}
		for _, ev := range []string{"start", "conn"} {
			if got := readLog(t, logBuf, ev)[0]["loss_detection"]; got != ld {
				t.Errorf("-loss-detection %s: the %s record says %v", ld, ev, got)
			}
		}
		spurious, thresholds := lossEvents(t, cfg.QlogDir)
		if spurious == 0 {
			t.Fatalf("-loss-detection %s: no spurious loss in the qlog (the test's reordering did not work)", ld)
		}
		want := []string{"3"} // the initial recovery_parameters_set only
		if ld == quic.LossDetectionAdaptive {
			want = []string{"3", "disabled"}
		}
		if len(thresholds) != len(want) || thresholds[0] != want[0] || thresholds[len(thresholds)-1] != want[len(want)-1] {
			t.Errorf("-loss-detection %s: reordering thresholds %v in the qlog, want %v (%d spurious losses)", ld, thresholds, want, spurious)
		} else {
			t.Logf("-loss-detection %s: %d spurious loss(es), reordering thresholds %v", ld, spurious, thresholds)
		}
	}
}

// lossEvents reads the server's qlog: how many spurious losses, and the
// reordering threshold of each recovery_parameters_set event in order.
func lossEvents(t *testing.T, qlogDir string) (spurious int, thresholds []string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(qlogDir, "*_server.sqlog"))
	if len(files) != 1 {
		t.Fatalf("%d server qlogs in %s", len(files), qlogDir)
	}
	b, err := os.ReadFile(files[0])
	must(t, err)
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev struct {
			Name string
			Data struct {
				ReorderingThreshold json.RawMessage `json:"reordering_threshold"`
			}
		}
		if json.Unmarshal(bytes.TrimLeft(sc.Bytes(), "\x1e"), &ev) != nil {
			continue
		}
		switch ev.Name {
		case "recovery:spurious_loss":
			spurious++
		case "quic:recovery_parameters_set":
			thresholds = append(thresholds, string(bytes.Trim(ev.Data.ReorderingThreshold, `"`)))
		}
	}
	return spurious, thresholds
}
