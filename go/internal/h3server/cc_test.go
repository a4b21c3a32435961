package h3server

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	proxy "github.com/quic-go/quic-go/integrationtests/tools/proxy"
)

// restoreCC puts quic-go's own congestion control back when the test ends
// (the setting is process-wide).
func restoreCC(t *testing.T) {
	t.Cleanup(func() {
		must(t, quic.SetCongestionControl(DefaultCC))
		must(t, quic.SetCubicParams(DefaultCubicN, DefaultCubicBeta))
		must(t, quic.SetLossDetection(DefaultLossDetection))
	})
}

// get fetches path from addr over HTTP/3 and returns the body's length.
func get(t *testing.T, pool *tls.Config, addr net.Addr, path string) int {
	t.Helper()
	tr := &http3.Transport{TLSClientConfig: pool}
	defer func() { _ = tr.Close() }()
	url := "https://localhost:" + strconv.Itoa(addr.(*net.UDPAddr).Port) + path
	resp, err := (&http.Client{Transport: tr, Timeout: 20 * time.Second}).Get(url)
	must(t, err)
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	must(t, err)
	return len(body)
}

func TestLogReadsCongestionControlBack(t *testing.T) {
	restoreCC(t)
	certPath, keyPath, pool := certFiles(t)
	dir := tree(t)
	for _, tc := range []struct {
		cfg        Config
		n          any // as JSON decodes it
		beta, json string
	}{
		{Config{CC: "cubic", CubicN: 2, CubicBeta: 0.7}, float64(2), "0.7", `"cubic_beta":0.7,`},
		{Config{CC: "cubic", CubicN: 1, CubicBeta: 0.5}, float64(1), "0.5", `"cubic_beta":0.5,`},
		{Config{CC: "reno"}, nil, "<nil>", `"cubic_beta":null,`},
	} {
		cfg := tc.cfg
		cfg.Addr, cfg.Docroot, cfg.Cert, cfg.Key, cfg.LossDetection = "127.0.0.1:0", dir, certPath, keyPath, DefaultLossDetection
		logBuf := &safeBuffer{mu: make(chanMutex, 1)}
		srv, err := Start(cfg, NewLogger(logBuf))
		must(t, err)
		if cc := quic.CongestionControl(); cc != cfg.CC {
			t.Errorf("%s: quic-go runs %s", cfg.CC, cc)
		}
		get(t, &tls.Config{RootCAs: pool, ServerName: "localhost"}, srv.Addr(), "/5kb/img-000.jpg")
		waitFor(t, logBuf, "conn", 1)
		srv.Stop(time.Second)
		for _, ev := range []string{"start", "conn"} {
			rec := readLog(t, logBuf, ev)[0]
			if rec["cc"] != cfg.CC || rec["cubic_n"] != tc.n || strconv.Quote(fmtAny(rec["cubic_beta"])) != strconv.Quote(tc.beta) {
				t.Errorf("%s record with %+v: cc %v, cubic_n %v, cubic_beta %v", ev, tc.cfg, rec["cc"], rec["cubic_n"], rec["cubic_beta"])
			}
		}
		if !strings.Contains(logBuf.String(), tc.json) {
			t.Errorf("log does not say %s:\n%s", tc.json, logBuf.String())
		}
		if p, _ := readLog(t, logBuf, "start")[0]["quic_go_patch"].(string); !strings.HasPrefix(p, "quic-go-v0.65.0-cubic-params sha256:") {
			t.Errorf("start record's quic_go_patch: %q", p)
		}
	}
}

func fmtAny(v any) string {
	if v == nil {
		return "<nil>"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// Through a real connection: the server drops one of its packets, and the
// qlog shows the window cut to (N-1+beta)/N with cubic, 0.7 with reno.
func TestLossCutsTheWindowAsConfigured(t *testing.T) {
	restoreCC(t)
	certPath, keyPath, pool := certFiles(t)
	dir := tree(t)
	must(t, os.WriteFile(filepath.Join(dir, "big.bin"), bytes.Repeat([]byte("quicbed "), 1<<17), 0o644)) // 1 MiB
	for _, tc := range []struct {
		cfg    Config
		factor float64
	}{
		{Config{CC: "reno"}, 0.7},
		{Config{CC: "cubic", CubicN: 2, CubicBeta: 0.7}, 0.85},
		{Config{CC: "cubic", CubicN: 2, CubicBeta: 0.5}, 0.75},
		{Config{CC: "cubic", CubicN: 1, CubicBeta: 0.7}, 0.7},
	} {
		cfg := tc.cfg
		cfg.Addr, cfg.Docroot, cfg.Cert, cfg.Key, cfg.QlogDir = "127.0.0.1:0", dir, certPath, keyPath, filepath.Join(t.TempDir(), "qlog") // made by Start
		cfg.LossDetection = DefaultLossDetection
		srv, err := Start(cfg, NewLogger(io.Discard))
		must(t, err)
		udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		must(t, err)
		var shortHeader atomic.Int32
		px := &proxy.Proxy{Conn: udp, ServerAddr: srv.Addr().(*net.UDPAddr),
			DropPacket: func(d proxy.Direction, _, _ net.Addr, b []byte) bool {
				// the 100th 1-RTT packet from the server
				return d == proxy.DirectionOutgoing && b[0]&0x80 == 0 && shortHeader.Add(1) == 100
			}}
		must(t, px.Start())
		n := get(t, &tls.Config{RootCAs: pool, ServerName: "localhost"}, px.LocalAddr(), "/big.bin")
		_ = px.Close()
		srv.Stop(time.Second)
		if n != 1<<20 {
			t.Fatalf("-cc %s: got %d bytes", cfg.CC, n)
		}
		before, after := cwndAroundFirstLoss(t, cfg.QlogDir)
		ratio := float64(after) / float64(before)
		// before is the last window logged before the loss; ACKs in the same
		// frame may have grown it a little more before the cut.
		arm := fmt.Sprintf("-cc %s -cubic-n %d -cubic-beta %v", cfg.CC, cfg.CubicN, cfg.CubicBeta)
		if ratio < tc.factor-0.005 || ratio > tc.factor+0.03 {
			t.Errorf("%s: cwnd %d -> %d at the first loss (x%.3f), want x%.2f", arm, before, after, ratio, tc.factor)
		} else {
			t.Logf("%s: cwnd %d -> %d at the first loss (x%.3f)", arm, before, after, ratio)
		}
	}
	// the qlog directory is the server's setting, not the process's environment
	if v, ok := os.LookupEnv("QLOGDIR"); ok {
		t.Errorf("QLOGDIR=%s is set in the environment", v)
	}
}

// cwndAroundFirstLoss reads the server's qlog: the congestion window last
// logged before the first lost packet and first logged after it.
func cwndAroundFirstLoss(t *testing.T, qlogDir string) (before, after int) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(qlogDir, "*_server.sqlog"))
	if len(files) != 1 {
		t.Fatalf("%d server qlogs in %s", len(files), qlogDir)
	}
	b, err := os.ReadFile(files[0])
	must(t, err)
	lost := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev struct {
			Name string
			Data struct {
				CongestionWindow *int `json:"congestion_window"`
			}
		}
		if json.Unmarshal(bytes.TrimLeft(sc.Bytes(), "\x1e"), &ev) != nil {
			continue
		}
		switch {
		case ev.Name == "recovery:packet_lost":
			lost = true
		case ev.Name == "recovery:metrics_updated" && ev.Data.CongestionWindow != nil:
			if !lost {
				before = *ev.Data.CongestionWindow
			} else if *ev.Data.CongestionWindow != before {
				return before, *ev.Data.CongestionWindow
			}
		}
	}
	t.Fatalf("no loss with a window change in %s (lost: %v)", files[0], lost)
	return
}
