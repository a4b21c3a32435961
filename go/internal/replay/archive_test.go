package replay

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// body is one response of a test archive.
type body struct {
	method, url string
	status      int
	headers     [][]string
	data        []byte
	waitMs      *float64
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// manifest is archive.json for the responses, as the Python side writes it:
// origins in the order of their first response.
func manifest(name string, bodies []body) map[string]any {
	var origins []any
	idx := map[string]int{}
	for _, b := range bodies {
		origin, _, _, err := SplitURL(b.url)
		if err != nil {
			panic(err)
		}
		if _, ok := idx[origin]; !ok {
			host, port, _ := hostPort(strings.TrimPrefix(origin, "https://"))
			if port == 0 {
				port = 443
			}
			idx[origin] = len(origins)
			origins = append(origins, map[string]any{"origin": origin, "host": host, "port": port, "rtt_ms": nil, "entries": []any{}})
		}
		o := origins[idx[origin]].(map[string]any)
		headers := b.headers
		if headers == nil {
			headers = [][]string{}
		}
		o["entries"] = append(o["entries"].([]any), map[string]any{
			"method": b.method, "url": b.url, "status": b.status, "headers": headers,
			"body": sha(b.data), "size": len(b.data), "wait_ms": b.waitMs,
		})
	}
	return map[string]any{"format": 1, "name": name, "main": bodies[0].url,
		"source": map[string]string{"kind": "model"}, "origins": origins}
}

// writeArchive writes an archive of bodies into a new folder; edit, if not nil,
// changes the manifest first.
func writeArchive(t *testing.T, bodies []body, edit func(m map[string]any)) string {
	t.Helper()
	dir := t.TempDir()
	m := manifest("test-page", bodies)
	if edit != nil {
		edit(m)
	}
	data, err := json.MarshalIndent(m, "", " ")
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, Manifest), data, 0o644))
	must(t, os.MkdirAll(filepath.Join(dir, Bodies), 0o755))
	for _, b := range bodies {
		must(t, os.WriteFile(filepath.Join(dir, Bodies, sha(b.data)), b.data, 0o644))
	}
	return dir
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func ptr[T any](v T) *T { return &v }

func page() []body {
	return []body{
		{"GET", "https://www.a.example/", 200, [][]string{{"content-type", "text/html; charset=utf-8"}, {"cache-control", "no-store"}}, []byte("<html><script src=https://cdn.b.example/app.js></script></html>"), ptr(30.0)},
		{"GET", "https://cdn.b.example/app.js?v=1", 200, [][]string{{"content-type", "text/javascript"}, {"set-cookie", "a=1"}, {"set-cookie", "b=2"}}, []byte(strings.Repeat("x()\n", 5000)), nil},
		{"GET", "https://www.a.example/logo.png", 200, [][]string{}, []byte{0x89, 'P', 'N', 'G', 0, 1, 2}, ptr(0.0)},
		{"GET", "https://www.a.example/gone", 404, [][]string{{"content-type", "text/plain"}}, []byte("not here"), nil},
		{"GET", "https://www.a.example/same", 304, [][]string{{"etag", `"1"`}}, []byte{}, nil},
		// the same bytes as the first body: one file
		{"GET", "https://www.a.example/again.html", 200, [][]string{{"content-type", "text/html; charset=utf-8"}}, []byte("<html><script src=https://cdn.b.example/app.js></script></html>"), nil},
	}
}

func TestLoad(t *testing.T) {
	dir := writeArchive(t, page(), nil)
	a, err := Load(dir)
	must(t, err)
	if a.Name != "test-page" || len(a.Origins) != 2 || len(a.Entries()) != 6 {
		t.Fatalf("loaded %s: %d origins, %d entries", a.Name, len(a.Origins), len(a.Entries()))
	}
	if got := a.Hosts(); len(got) != 2 || got[0] != "www.a.example" || got[1] != "cdn.b.example" {
		t.Fatalf("hosts %v", got)
	}
	for i, e := range a.Entries() {
		if sha(a.BodyOf(e)) != e.Body || int64(len(a.BodyOf(e))) != e.Size {
			t.Fatalf("entry %d %s: body of %d bytes", i, e.URL, len(a.BodyOf(e)))
		}
	}
	data, _ := os.ReadFile(filepath.Join(dir, Manifest))
	if a.ManifestSHA256 != sha(data) {
		t.Fatalf("manifest sha256 %s", a.ManifestSHA256)
	}
	if e := a.Origins[1].Entries[0]; len(e.Headers) != 3 || e.Headers[2] != [2]string{"set-cookie", "b=2"} {
		t.Fatalf("headers %v", e.Headers)
	}
}

// Each refusal names what is wrong.
func TestLoadRefusals(t *testing.T) {
	entry := func(m map[string]any, o, e int) map[string]any {
		return m["origins"].([]any)[o].(map[string]any)["entries"].([]any)[e].(map[string]any)
	}
	cases := map[string]struct {
		edit  func(m map[string]any)
		files func(t *testing.T, dir string)
		want  string
	}{
		"bad format":    {edit: func(m map[string]any) { m["format"] = 2 }, want: "format 2: this server reads format 1"},
		"unknown field": {edit: func(m map[string]any) { m["bodies"] = "x" }, want: `unknown field "bodies"`},
		"bad name":      {edit: func(m map[string]any) { m["name"] = "Page" }, want: `name "Page"`},
		"no origins":    {edit: func(m map[string]any) { m["origins"] = []any{} }, want: "no origins"},
		"main not an entry": {edit: func(m map[string]any) { m["main"] = "https://www.a.example/index.html" },
			want: "main document https://www.a.example/index.html is not one of the entries"},
		"origin twice": {edit: func(m map[string]any) {
			o := m["origins"].([]any)
			m["origins"] = append(o, o[1])
		}, want: "origin https://cdn.b.example is listed twice"},
		"origin not host": {edit: func(m map[string]any) { m["origins"].([]any)[1].(map[string]any)["port"] = 8443 },
			want: `origin "https://cdn.b.example" is not https://cdn.b.example:8443`},
		"entry of another origin": {edit: func(m map[string]any) { entry(m, 1, 0)["url"] = "https://www.a.example/app.js" },
			want: "entry https://www.a.example/app.js is not of origin https://cdn.b.example"},
		"dropped header": {edit: func(m map[string]any) {
			entry(m, 0, 1)["headers"] = [][]string{{"content-encoding", "gzip"}}
		}, want: `https://www.a.example/logo.png: header "content-encoding" is one the header rule drops`},
		"upper-case header": {edit: func(m map[string]any) { entry(m, 0, 1)["headers"] = [][]string{{"Content-Type", "image/png"}} },
			want: `header name "Content-Type" is not a lower-case token`},
		"header not a pair": {edit: func(m map[string]any) { entry(m, 0, 1)["headers"] = [][]string{{"x-a"}} },
			want: "a header is not [name, value]"},
		"status 1xx": {edit: func(m map[string]any) { entry(m, 0, 1)["status"] = 103 },
			want: "status 103 is not a final response"},
		"body on 304": {edit: func(m map[string]any) { entry(m, 0, 1)["status"] = 304 },
			want: "a 304 response has no body, the entry has 7 bytes"},
		"bad method": {edit: func(m map[string]any) { entry(m, 0, 1)["method"] = "get" }, want: "method is not [A-Z]+"},
		"bad hash":   {edit: func(m map[string]any) { entry(m, 0, 1)["body"] = "ABC" }, want: "body is not a SHA-256"},
		"negative wait": {edit: func(m map[string]any) { entry(m, 0, 1)["wait_ms"] = -1 },
			want: "wait_ms -1 is negative"},
		"no size": {edit: func(m map[string]any) { delete(entry(m, 0, 1), "size") }, want: "size is not a byte count"},
		"not json": {files: func(t *testing.T, dir string) {
			must(t, os.WriteFile(filepath.Join(dir, Manifest), []byte("{"), 0o644))
		},
			want: "not a format-1 manifest"},
		"no manifest": {files: func(t *testing.T, dir string) { must(t, os.Remove(filepath.Join(dir, Manifest))) },
			want: "no archive.json there"},
		"missing body": {files: func(t *testing.T, dir string) { must(t, os.Remove(filepath.Join(dir, Bodies, sha(page()[2].data)))) },
			want: "https://www.a.example/logo.png: body " + sha(page()[2].data) + " is missing"},
		"wrong size": {files: func(t *testing.T, dir string) {
			must(t, os.WriteFile(filepath.Join(dir, Bodies, sha(page()[2].data)), []byte("PNG"), 0o644))
		}, want: "https://www.a.example/logo.png: body " + sha(page()[2].data) + " has 3 bytes, the entry says 7"},
		"wrong hash": {files: func(t *testing.T, dir string) {
			must(t, os.WriteFile(filepath.Join(dir, Bodies, sha(page()[2].data)), []byte{0x89, 'P', 'N', 'G', 0, 1, 3}, 0o644))
		}, want: "body " + sha(page()[2].data) + " does not hash to it"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			dir := writeArchive(t, page(), c.edit)
			if c.files != nil {
				c.files(t, dir)
			}
			_, err := Load(dir)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
			if !strings.Contains(err.Error(), "replay archive "+dir) {
				t.Fatalf("%v does not name the archive", err)
			}
		})
	}
}
