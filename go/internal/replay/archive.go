// Package replay serves a replay archive: a recorded multi-origin page that every
// arm of a cell serves byte for byte (docs/replay.md). It is the Go side of the
// rules quicbed/replay/archive.py implements in Python: the archive's format
// (format 1), the header rule and the matching rule; the two are held to the same
// table of cases (tests/data/replay/match-cases.json).
//
// An archive is a folder:
//
//	NAME/archive.json     the manifest
//	NAME/bodies/SHA256    each distinct response body, decoded, named by its hash
//
// Load reads the manifest, checks it as the Python model does, and reads every
// body into memory, refusing a body that is missing or has another size or
// SHA-256 than its entries say. The archive is immutable after Load.
package replay

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Format is the archive format this package reads (archive.json's "format").
const Format = 1

// Manifest and Bodies are the names of the manifest and of the bodies' folder.
const (
	Manifest = "archive.json"
	Bodies   = "bodies"
)

// How says how a request matched (docs/replay.md, "The matching rule").
type How string

const (
	// ByURL: an entry with the same method and URL (path and query, byte for byte).
	ByURL How = "url"
	// ByPath: the first recorded entry with the same method and path, any query.
	ByPath How = "path"
	// None: no entry; the server answers 404 with an empty body.
	None How = "none"
)

// hopByHop and serverSet are the response headers no arm serves as recorded
// (docs/replay.md, "The header rule"; quicbed/replay/archive.py HOP_BY_HOP and
// SERVER_SET). An archive's headers have been through the rule already: Load
// refuses one that still holds any of them.
var (
	hopByHop = map[string]bool{
		"connection": true, "keep-alive": true, "proxy-connection": true,
		"proxy-authenticate": true, "proxy-authorization": true, "te": true,
		"trailer": true, "transfer-encoding": true, "upgrade": true,
	}
	serverSet = map[string]bool{
		"content-length": true, "content-encoding": true, "alt-svc": true, "date": true, "server": true,
	}
)

// Dropped reports whether the header rule drops a recorded response header
// named name: hop-by-hop, pseudo (":status") and server-set headers.
func Dropped(name string) bool {
	n := strings.ToLower(strings.TrimSpace(name))
	return n == "" || strings.HasPrefix(n, ":") || hopByHop[n] || serverSet[n]
}

// Entry is one recorded request and its response.
type Entry struct {
	Method string
	// URL is the recorded URL without its fragment.
	URL    string
	Status int
	// Headers are the response headers as served: lower-case names, recorded
	// order, after the header rule.
	Headers [][2]string
	// Body is the SHA-256 (hex) of the body, Size its length in bytes.
	Body string
	Size int64
	// WaitMs is the recorded server time in ms, nil where unknown.
	WaitMs *float64

	path, query string
}

// Origin is one origin of the page: its own address and certificate on the testbed.
type Origin struct {
	Origin  string
	Host    string
	Port    int
	RTTms   *float64
	Entries []*Entry
}

// Archive is a loaded archive: the manifest and (after Load) the bodies.
type Archive struct {
	Name    string
	Main    string
	Source  map[string]string
	Origins []*Origin
	// ManifestSHA256 is the SHA-256 (hex) of archive.json's bytes as read.
	ManifestSHA256 string

	byOrigin map[string]*Origin
	bodies   map[string][]byte
}

// The manifest as written (archive.json), strict: an unknown field is an error,
// and a required field that is absent is told apart from its zero value.
type wireArchive struct {
	Format  *int              `json:"format"`
	Name    *string           `json:"name"`
	Main    *string           `json:"main"`
	Source  map[string]string `json:"source"`
	Origins []wireOrigin      `json:"origins"`
}

type wireOrigin struct {
	Origin  *string     `json:"origin"`
	Host    *string     `json:"host"`
	Port    *int        `json:"port"`
	RTTms   *float64    `json:"rtt_ms"`
	Entries []wireEntry `json:"entries"`
}

type wireEntry struct {
	Method  *string    `json:"method"`
	URL     *string    `json:"url"`
	Status  *int       `json:"status"`
	Headers [][]string `json:"headers"`
	Body    *string    `json:"body"`
	Size    *int64     `json:"size"`
	WaitMs  *float64   `json:"wait_ms"`
}

var (
	namePattern   = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)
	methodPattern = regexp.MustCompile(`^[A-Z]+$`)
	shaPattern    = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// Parse reads and checks a manifest (archive.json's bytes) without its bodies,
// as quicbed.replay.archive.Archive validates one, and more strictly where the Go
// server could not serve what the manifest says: a 1xx status (not a final
// response), a body on a 204 or 304, a header name that is not lower case or
// that the header rule drops, a header value with a line break or NUL.
func Parse(data []byte) (*Archive, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var w wireArchive
	if err := dec.Decode(&w); err != nil {
		return nil, fmt.Errorf("not a format-1 manifest: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("not a format-1 manifest: data after the JSON object")
	}
	switch {
	case w.Format != nil && *w.Format != Format:
		return nil, fmt.Errorf("format %d: this server reads format %d", *w.Format, Format)
	case w.Name == nil:
		return nil, errors.New("no name")
	case !namePattern.MatchString(*w.Name):
		return nil, fmt.Errorf("name %q: not [a-z0-9][a-z0-9._-]*", *w.Name)
	case w.Main == nil:
		return nil, errors.New("no main")
	case len(w.Origins) == 0:
		return nil, errors.New("no origins")
	}
	a := &Archive{Name: *w.Name, Main: *w.Main, Source: w.Source, byOrigin: map[string]*Origin{}}
	for i, wo := range w.Origins {
		o, err := parseOrigin(wo)
		if err != nil {
			return nil, fmt.Errorf("origins[%d]: %v", i, err)
		}
		if a.byOrigin[o.Origin] != nil {
			return nil, fmt.Errorf("origin %s is listed twice", o.Origin)
		}
		a.byOrigin[o.Origin] = o
		a.Origins = append(a.Origins, o)
	}
	if e, how, err := a.Match("GET", a.Main); err != nil || e == nil || how != ByURL {
		return nil, fmt.Errorf("main document %s is not one of the entries", a.Main)
	}
	return a, nil
}

func parseOrigin(w wireOrigin) (*Origin, error) {
	switch {
	case w.Origin == nil:
		return nil, errors.New("no origin")
	case w.Host == nil:
		return nil, fmt.Errorf("%s: no host", *w.Origin)
	case w.Port != nil && (*w.Port < 1 || *w.Port > 65535):
		return nil, fmt.Errorf("%s: port %d is not 1-65535", *w.Origin, *w.Port)
	case w.RTTms != nil && *w.RTTms < 0:
		return nil, fmt.Errorf("%s: rtt_ms %v is negative", *w.Origin, *w.RTTms)
	case len(w.Entries) == 0:
		return nil, fmt.Errorf("%s: no entries", *w.Origin)
	}
	o := &Origin{Origin: *w.Origin, Host: *w.Host, Port: 443, RTTms: w.RTTms}
	if w.Port != nil {
		o.Port = *w.Port
	}
	if want := originString(o.Host, o.Port); o.Origin != want {
		return nil, fmt.Errorf("origin %q is not %s", o.Origin, want)
	}
	for i, we := range w.Entries {
		e, err := parseEntry(we)
		if err != nil {
			return nil, fmt.Errorf("%s: entries[%d]: %v", o.Origin, i, err)
		}
		origin, path, query, err := SplitURL(e.URL)
		if err != nil {
			return nil, err
		}
		if origin != o.Origin {
			return nil, fmt.Errorf("entry %s is not of origin %s", e.URL, o.Origin)
		}
		e.path, e.query = path, query
		o.Entries = append(o.Entries, e)
	}
	return o, nil
}

func parseEntry(w wireEntry) (*Entry, error) {
	switch {
	case w.URL == nil:
		return nil, errors.New("no url")
	case w.Method == nil || !methodPattern.MatchString(*w.Method):
		return nil, fmt.Errorf("%s: method is not [A-Z]+", *w.URL)
	case w.Status == nil || *w.Status < 100 || *w.Status > 599:
		return nil, fmt.Errorf("%s: status is not 100-599", *w.URL)
	case *w.Status < 200:
		return nil, fmt.Errorf("%s: status %d is not a final response, which is all a server can replay", *w.URL, *w.Status)
	case w.Body == nil || !shaPattern.MatchString(*w.Body):
		return nil, fmt.Errorf("%s: body is not a SHA-256 in lower-case hex", *w.URL)
	case w.Size == nil || *w.Size < 0:
		return nil, fmt.Errorf("%s: size is not a byte count", *w.URL)
	case (*w.Status == 204 || *w.Status == 304) && *w.Size != 0:
		return nil, fmt.Errorf("%s: a %d response has no body, the entry has %d bytes", *w.URL, *w.Status, *w.Size)
	case w.WaitMs != nil && *w.WaitMs < 0:
		return nil, fmt.Errorf("%s: wait_ms %v is negative", *w.URL, *w.WaitMs)
	}
	if _, _, _, err := SplitURL(*w.URL); err != nil {
		return nil, err
	}
	url, _, _ := strings.Cut(*w.URL, "#")
	e := &Entry{Method: *w.Method, URL: url, Status: *w.Status, Body: *w.Body, Size: *w.Size, WaitMs: w.WaitMs}
	for _, h := range w.Headers {
		if len(h) != 2 {
			return nil, fmt.Errorf("%s: a header is not [name, value]: %q", e.URL, h)
		}
		name, value := h[0], h[1]
		switch {
		case Dropped(name):
			return nil, fmt.Errorf("%s: header %q is one the header rule drops (docs/replay.md)", e.URL, name)
		case !validName(name):
			return nil, fmt.Errorf("%s: header name %q is not a lower-case token", e.URL, name)
		case strings.ContainsAny(value, "\r\n\x00"):
			return nil, fmt.Errorf("%s: header %s: the value holds a line break or NUL", e.URL, name)
		}
		e.Headers = append(e.Headers, [2]string{name, value})
	}
	return e, nil
}

// validName: an RFC 9110 token without upper-case letters (HTTP/2 and HTTP/3
// send names in lower case).
func validName(name string) bool {
	if name == "" {
		return false
	}
	for _, c := range []byte(name) {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

func originString(host string, port int) string {
	if port == 443 {
		return "https://" + host
	}
	return "https://" + host + ":" + strconv.Itoa(port)
}

// SplitURL is quicbed.replay.archive.split_url: the origin (https://host[:port],
// the host in lower case, the port only when not 443), the path (at least "/")
// and the query of an https URL, byte for byte as written (percent-encoding left
// as is), the fragment dropped. It splits as Python's urllib.parse.urlsplit does.
func SplitURL(raw string) (origin, path, query string, err error) {
	scheme, rest, ok := strings.Cut(raw, ":")
	if !ok || strings.ToLower(scheme) != "https" || !strings.HasPrefix(rest, "//") {
		return "", "", "", fmt.Errorf("%q is not an https URL with a host", raw)
	}
	rest = rest[2:]
	netloc := rest
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		netloc, rest = rest[:i], rest[i:]
	} else {
		rest = ""
	}
	host, port, err := hostPort(netloc)
	if err != nil {
		return "", "", "", fmt.Errorf("%q: %v", raw, err)
	}
	if host == "" {
		return "", "", "", fmt.Errorf("%q is not an https URL with a host", raw)
	}
	if port == 0 {
		port = 443
	}
	path, query = target(rest)
	return originString(host, port), path, query, nil
}

// target splits a request target (path and query) as SplitURL splits a URL's
// rest: the fragment dropped, the path at least "/".
func target(t string) (path, query string) {
	t, _, _ = strings.Cut(t, "#")
	path, query, _ = strings.Cut(t, "?")
	if path == "" {
		path = "/"
	}
	return path, query
}

// hostPort is urlsplit's hostname and port of a netloc (userinfo dropped, IPv6
// brackets removed, the host in lower case); port 0: none given.
func hostPort(netloc string) (string, int, error) {
	if i := strings.LastIndexByte(netloc, '@'); i >= 0 {
		netloc = netloc[i+1:]
	}
	var host, port string
	if _, bracketed, ok := strings.Cut(netloc, "["); ok {
		var after string
		host, after, _ = strings.Cut(bracketed, "]")
		_, port, _ = strings.Cut(after, ":")
	} else {
		host, port, _ = strings.Cut(netloc, ":")
	}
	if port == "" {
		return strings.ToLower(host), 0, nil
	}
	n, err := strconv.Atoi(port)
	if err != nil || strings.ContainsAny(port, "+-") || n > 65535 {
		return "", 0, fmt.Errorf("port %q is not 0-65535", port)
	}
	return strings.ToLower(host), n, nil
}

// Match is the matching rule (docs/replay.md; Archive.match in Python): the entry
// of the URL's origin with the same method and URL (ByURL), else the first
// recorded with the same method and path (ByPath), else nil and None. An error:
// the URL is not an https URL with a host.
func (a *Archive) Match(method, url string) (*Entry, How, error) {
	origin, path, query, err := SplitURL(url)
	if err != nil {
		return nil, None, err
	}
	e, how := a.match(method, origin, path, query)
	return e, how, nil
}

func (a *Archive) match(method, origin, path, query string) (*Entry, How) {
	o := a.byOrigin[origin]
	if o == nil {
		return nil, None
	}
	var first *Entry
	for _, e := range o.Entries {
		if e.Method != method || e.path != path {
			continue
		}
		if e.query == query {
			return e, ByURL
		}
		if first == nil {
			first = e
		}
	}
	if first != nil {
		return first, ByPath
	}
	return nil, None
}

// Entries are all entries, origin by origin, in recorded order.
func (a *Archive) Entries() []*Entry {
	var out []*Entry
	for _, o := range a.Origins {
		out = append(out, o.Entries...)
	}
	return out
}

// Hosts are the origins' hosts, each once, in the origins' order.
func (a *Archive) Hosts() []string {
	var out []string
	seen := map[string]bool{}
	for _, o := range a.Origins {
		if !seen[o.Host] {
			seen[o.Host] = true
			out = append(out, o.Host)
		}
	}
	return out
}

// BodyOf is the body of e as loaded (nil before Load, or for an entry of
// another archive).
func (a *Archive) BodyOf(e *Entry) []byte { return a.bodies[e.Body] }

// Load reads the archive in dir: its manifest (Parse) and every body, each of
// the size and SHA-256 its entries say. Errors name the folder, and the entry
// or body at fault.
func Load(dir string) (*Archive, error) {
	path := filepath.Join(dir, Manifest)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("replay archive %s: no %s there", dir, Manifest)
	} else if err != nil {
		return nil, fmt.Errorf("replay archive %s: %v", dir, err)
	}
	a, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("replay archive %s: %v", path, err)
	}
	sum := sha256.Sum256(data)
	a.ManifestSHA256 = hex.EncodeToString(sum[:])
	// as the Python loader: every entry's body present with its size, then each
	// distinct body's hash
	a.bodies = map[string][]byte{}
	var distinct []string
	for _, e := range a.Entries() {
		b, ok := a.bodies[e.Body]
		if !ok {
			b, err = os.ReadFile(filepath.Join(dir, Bodies, e.Body))
			if errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("replay archive %s: %s: body %s is missing", dir, e.URL, e.Body)
			} else if err != nil {
				return nil, fmt.Errorf("replay archive %s: %s: body %s: %v", dir, e.URL, e.Body, err)
			}
			a.bodies[e.Body] = b
			distinct = append(distinct, e.Body)
		}
		if int64(len(b)) != e.Size {
			return nil, fmt.Errorf("replay archive %s: %s: body %s has %d bytes, the entry says %d", dir, e.URL, e.Body, len(b), e.Size)
		}
	}
	for _, sha := range distinct {
		if sum := sha256.Sum256(a.bodies[sha]); hex.EncodeToString(sum[:]) != sha {
			return nil, fmt.Errorf("replay archive %s: body %s does not hash to it", dir, sha)
		}
	}
	return a, nil
}
