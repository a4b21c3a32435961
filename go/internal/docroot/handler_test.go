package docroot

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// The full header set of each kind of response: exactly these keys, nothing else
// (h3server's tests check the same through HTTP/3, go/gquic's through gQUIC).
func TestHandlerExactHeaders(t *testing.T) {
	dir := t.TempDir()
	files := map[string][]byte{
		"p/index.html": []byte("<html></html>"),
		"p/a.jpg":      bytes.Repeat([]byte{0xff, 0xd8}, 3000),
		"p/b.JPEG":     []byte("jpeg"),
		"p/c.json":     []byte("{}"),
		"p/d.bin":      {0, 1, 2},
	}
	for name, body := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	type logged struct {
		status int
		bytes  int64
	}
	var got []logged
	h, err := NewHandler(dir, func(_ *http.Request, status int, n int64, _ time.Duration) {
		got = append(got, logged{status, n})
	})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		method, path string
		status       int
		ctype        string
		body         []byte
		keys         string
	}{
		{"GET", "/p/", 200, "text/html", files["p/index.html"], "Cache-Control Content-Length Content-Type"},
		{"GET", "/p/a.jpg", 200, "image/jpeg", files["p/a.jpg"], "Cache-Control Content-Length Content-Type"},
		{"GET", "/p/b.JPEG", 200, "image/jpeg", files["p/b.JPEG"], "Cache-Control Content-Length Content-Type"},
		{"GET", "/p/c.json", 200, "application/json", files["p/c.json"], "Cache-Control Content-Length Content-Type"},
		{"GET", "/p/d.bin", 200, "application/octet-stream", files["p/d.bin"], "Cache-Control Content-Length Content-Type"},
		{"HEAD", "/p/a.jpg", 200, "image/jpeg", nil, "Cache-Control Content-Length Content-Type"},
		{"GET", "/p/none.jpg", 404, "", nil, "Cache-Control"},
		{"POST", "/p/a.jpg", 405, "", nil, "Allow Cache-Control"},
	}
	for _, c := range cases {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(c.method, c.path, nil))
		var keys []string
		for k := range rec.Header() {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if rec.Code != c.status || rec.Header().Get("Content-Type") != c.ctype ||
			!bytes.Equal(rec.Body.Bytes(), c.body) || strings.Join(keys, " ") != c.keys ||
			rec.Header().Get("Cache-Control") != CacheControl {
			t.Errorf("%s %s: %d %q %d bytes, headers %v", c.method, c.path, rec.Code,
				rec.Header().Get("Content-Type"), rec.Body.Len(), rec.Header())
		}
	}
	if len(got) != len(cases) || got[1] != (logged{200, 6000}) || got[5] != (logged{200, 0}) || got[7] != (logged{405, 0}) {
		t.Errorf("logged %v", got)
	}
}
