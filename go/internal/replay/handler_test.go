package replay

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"
)

type logged struct {
	recs []map[string]any
}

func (l *logged) log(_ *http.Request, f map[string]any) { l.recs = append(l.recs, f) }

func serve(h *Handler, method, host, target string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, nil)
	req.Host = host
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func loadPage(t *testing.T) *Archive {
	t.Helper()
	a, err := Load(writeArchive(t, page(), nil))
	must(t, err)
	return a
}

func TestHandlerServesTheRecordedResponse(t *testing.T) {
	a := loadPage(t)
	l := &logged{}
	h := &Handler{Archive: a, Log: l.log}
	rec := serve(h, "GET", "cdn.b.example", "/app.js?v=2")
	want := page()[1]
	if rec.Code != 200 || !bytes.Equal(rec.Body.Bytes(), want.data) {
		t.Fatalf("status %d, %d bytes", rec.Code, rec.Body.Len())
	}
	hdr := rec.Result().Header
	if got := hdr.Values("Set-Cookie"); !reflect.DeepEqual(got, []string{"a=1", "b=2"}) {
		t.Errorf("set-cookie %v", got)
	}
	if hdr.Get("Content-Type") != "text/javascript" || hdr.Get("Content-Length") != "20000" {
		t.Errorf("headers %v", hdr)
	}
	for _, k := range []string{"Content-Encoding", "Alt-Svc", "Server", "Etag"} {
		if _, ok := hdr[k]; ok {
			t.Errorf("header %s served: %v", k, hdr)
		}
	}
	r := l.recs[0]
	wantRec := map[string]any{
		"host": "cdn.b.example", "origin": "https://cdn.b.example", "method": "GET", "url": "/app.js?v=2",
		"match": "path", "entry": "https://cdn.b.example/app.js?v=1", "status": 200, "bytes": int64(20000),
		"sha256": sha(want.data)[:SHA256Prefix], "proto": "HTTP/1.1", "wait_ms": 0.0,
	}
	for k, v := range wantRec {
		if r[k] != v {
			t.Errorf("log %s: got %#v want %#v", k, r[k], v)
		}
	}

	// no recorded content-type: none served, none sniffed
	rec = serve(h, "GET", "www.a.example", "/logo.png")
	if len(rec.Result().Header.Values("Content-Type")) != 0 || rec.Code != 200 || rec.Body.Len() != 7 || rec.Header().Get("Content-Length") != "7" {
		t.Fatalf("logo: %d %v %d bytes", rec.Code, rec.Result().Header, rec.Body.Len())
	}
	// a recorded 404 is the entry's, with its body
	rec = serve(h, "GET", "www.a.example:443", "/gone")
	if rec.Code != 404 || rec.Body.String() != "not here" || l.recs[2]["match"] != "url" {
		t.Fatalf("recorded 404: %d %q %v", rec.Code, rec.Body.String(), l.recs[2])
	}
	// a 304: no content-length, no body
	rec = serve(h, "GET", "www.a.example", "/same")
	if rec.Code != 304 || rec.Body.Len() != 0 || rec.Header().Get("Content-Length") != "" || rec.Header().Get("Etag") != `"1"` {
		t.Fatalf("304: %d %v", rec.Code, rec.Header())
	}
}

func TestHandlerUnmatched(t *testing.T) {
	a := loadPage(t)
	l := &logged{}
	h := &Handler{Archive: a, Log: l.log}
	for _, c := range []struct{ method, host, target string }{
		{"GET", "www.a.example", "/nothing"},
		{"POST", "www.a.example", "/"},
		{"GET", "www.c.example", "/"},
		{"GET", "", "/"},
	} {
		rec := serve(h, c.method, c.host, c.target)
		if rec.Code != 404 || rec.Body.Len() != 0 || rec.Header().Get("Content-Length") != "0" {
			t.Errorf("%v: %d, %d bytes, %v", c, rec.Code, rec.Body.Len(), rec.Header())
		}
		if len(rec.Result().Header.Values("Content-Type")) != 0 {
			t.Errorf("%v: content-type on a 404", c)
		}
	}
	r := l.recs[0]
	want := map[string]any{"host": "www.a.example", "origin": "https://www.a.example", "method": "GET",
		"url": "/nothing", "match": "none", "entry": nil, "status": 404, "bytes": int64(0), "sha256": nil}
	for k, v := range want {
		if r[k] != v {
			t.Errorf("log %s: got %#v want %#v", k, r[k], v)
		}
	}
	if len(l.recs) != 4 || l.recs[2]["origin"] != "https://www.c.example" {
		t.Fatalf("records %v", l.recs)
	}
}

// The origin is the :authority's host (lower case) with the listener's port.
func TestHandlerOrigin(t *testing.T) {
	h := &Handler{}
	withLocal := func(port int) *http.Request {
		r := httptest.NewRequest("GET", "/", nil)
		return r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: port}))
	}
	cases := []struct {
		host string
		r    *http.Request
		port int
		want string
	}{
		{"WWW.A.example", httptest.NewRequest("GET", "/", nil), 0, "https://www.a.example"},
		{"www.a.example:443", httptest.NewRequest("GET", "/", nil), 0, "https://www.a.example"},
		{"www.a.example", httptest.NewRequest("GET", "/", nil), 4433, "https://www.a.example:4433"},
		{"www.a.example", withLocal(443), 4433, "https://www.a.example"},
		{"www.a.example", withLocal(8443), 0, "https://www.a.example:8443"},
		{"www.a.example:8443", withLocal(443), 0, "https://www.a.example"},
		{"[::1]:443", withLocal(443), 0, "https://::1"},
	}
	for _, c := range cases {
		c.r.Host = c.host
		h.Port = c.port
		if got := h.Origin(c.r); got != c.want {
			t.Errorf("%s (handler port %d): got %s want %s", c.host, c.port, got, c.want)
		}
	}
}

// wait_ms is slept only when asked, and only where recorded.
func TestHandlerWait(t *testing.T) {
	bodies := page()
	bodies[0].waitMs = ptr(120.0)
	a, err := Load(writeArchive(t, bodies, nil))
	must(t, err)
	for _, wait := range []bool{false, true} {
		l := &logged{}
		h := &Handler{Archive: a, Wait: wait, Log: l.log}
		start := time.Now()
		rec := serve(h, "GET", "www.a.example", "/")
		took := time.Since(start)
		if rec.Code != 200 || rec.Body.String() != string(bodies[0].data) {
			t.Fatalf("wait %v: %d %q", wait, rec.Code, rec.Body.String())
		}
		slept := l.recs[0]["wait_ms"].(float64)
		if wait && (took < 120*time.Millisecond || slept < 120) {
			t.Errorf("wait on: answered after %v, logged wait_ms %v", took, slept)
		}
		if !wait && (took > 60*time.Millisecond || slept != 0) {
			t.Errorf("wait off: answered after %v, logged wait_ms %v", took, slept)
		}
		// no wait_ms recorded (null) or 0: never a sleep
		serve(h, "GET", "cdn.b.example", "/app.js?v=1")
		serve(h, "GET", "www.a.example", "/logo.png")
		if l.recs[1]["wait_ms"] != 0.0 || l.recs[2]["wait_ms"] != 0.0 {
			t.Errorf("wait %v: slept %v and %v without a recorded wait", wait, l.recs[1]["wait_ms"], l.recs[2]["wait_ms"])
		}
	}
	// a client that goes away ends the sleep
	l := &logged{}
	h := &Handler{Archive: a, Wait: true, Log: l.log}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	req := httptest.NewRequest("GET", "/", nil).WithContext(ctx)
	req.Host = "www.a.example"
	start := time.Now()
	h.ServeHTTP(httptest.NewRecorder(), req)
	if took := time.Since(start); took > 100*time.Millisecond {
		t.Errorf("a cancelled request slept %v", took)
	}
}

// HEAD of a recorded HEAD entry: the body's length, no body.
func TestHandlerHead(t *testing.T) {
	bodies := append(page(), body{"HEAD", "https://www.a.example/big.bin", 200, [][]string{{"content-type", "application/octet-stream"}}, []byte(strings.Repeat("b", 100)), nil})
	a, err := Load(writeArchive(t, bodies, nil))
	must(t, err)
	l := &logged{}
	rec := serve(&Handler{Archive: a, Log: l.log}, "HEAD", "www.a.example", "/big.bin")
	if rec.Code != 200 || rec.Body.Len() != 0 || rec.Header().Get("Content-Length") != "100" || l.recs[0]["bytes"] != int64(0) {
		t.Fatalf("HEAD: %d %v %d bytes, %v", rec.Code, rec.Header(), rec.Body.Len(), l.recs[0])
	}
}
