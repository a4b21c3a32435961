package h3server

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// Each conn record carries both sides' transport parameters as quic-go's
// qlog records them: the server's own (tp_local, from its flags) and the
// client's (tp_remote, decoded from its handshake), without a qlog directory.
func TestConnRecordHasBothSidesTransportParameters(t *testing.T) {
	certPath, keyPath, pool := certFiles(t)
	dir := tree(t)
	logBuf := &safeBuffer{mu: make(chanMutex, 1)}
	cfg := Config{Addr: "127.0.0.1:0", Docroot: dir, Cert: certPath, Key: keyPath, CC: "reno",
		LossDetection: DefaultLossDetection, InitialConnWindow: 100000, InitialStreamWindow: 200000,
		MaxIncomingStreams: 7, MaxIncomingUniStreams: 5, IdleTimeout: 12 * time.Second, NoAutotune: true}
	srv, err := Start(cfg, NewLogger(logBuf))
	must(t, err)
	defer srv.Stop(time.Second)
	tr := &http3.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"},
		QUICConfig: &quic.Config{InitialConnectionReceiveWindow: 65536, InitialStreamReceiveWindow: 32768,
			MaxIncomingStreams: 9, MaxIdleTimeout: 7 * time.Second},
	}
	defer func() { _ = tr.Close() }()
	url := "https://localhost:" + strings.Split(srv.Addr().String(), ":")[1] + "/5kb/img-000.jpg"
	resp, err := (&http.Client{Transport: tr}).Get(url)
	must(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	conn := waitFor(t, logBuf, "conn", 1)[0]
	want := map[string]map[string]json.Number{
		"tp_local": {"initial_max_data": "100000", "initial_max_stream_data_bidi_local": "200000",
			"initial_max_stream_data_bidi_remote": "200000", "initial_max_stream_data_uni": "200000",
			"initial_max_streams_bidi": "7", "initial_max_streams_uni": "5", "max_idle_timeout": "12000"},
		"tp_remote": {"initial_max_data": "65536", "initial_max_stream_data_bidi_local": "32768",
			"initial_max_streams_bidi": "9", "max_idle_timeout": "7000"},
	}
	for side, kv := range want {
		got, ok := conn[side].(map[string]any)
		if !ok {
			t.Fatalf("conn record has no %s: %v", side, conn)
		}
		for k, v := range kv {
			if n, _ := got[k].(float64); json.Number(fmtAny(n)) != v {
				t.Errorf("%s.%s = %v, want %s", side, k, got[k], v)
			}
		}
		if _, ok := got["stateless_reset_token"]; ok {
			t.Errorf("%s keeps the stateless reset token: %v", side, got)
		}
	}
	if conn["flow_control_autotune"] != false {
		t.Errorf("conn record's flow_control_autotune: %v", conn["flow_control_autotune"])
	}
	start := readLog(t, logBuf, "start")[0]
	if w, _ := start["windows"].(map[string]any); w["max_conn"] != float64(100000) || w["max_stream"] != float64(200000) {
		t.Errorf("start record's windows: %v", start["windows"])
	}
}

func TestWindowsFollowQuicGoAndTheFlags(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want [4]uint64
	}{
		{Config{}, [4]uint64{512 << 10, 6 << 20, 768 << 10, 15 << 20}},
		{Config{InitialConnWindow: 20 << 20}, [4]uint64{512 << 10, 6 << 20, 20 << 20, 20 << 20}},
		{Config{InitialConnWindow: 65536, NoAutotune: true}, [4]uint64{512 << 10, 512 << 10, 65536, 65536}},
		{Config{InitialStreamWindow: 1 << 20, MaxStreamWindow: 2 << 20}, [4]uint64{1 << 20, 2 << 20, 768 << 10, 15 << 20}},
	} {
		a, b, c, d := tc.cfg.Windows()
		if got := [4]uint64{a, b, c, d}; got != tc.want {
			t.Errorf("%+v: windows %v, want %v", tc.cfg, got, tc.want)
		}
	}
}
