// Package docroot is the HTTP handler of quicbed's own servers (HTTP/3 on quic-go,
// gQUIC on quic-go v0.10.2): it serves the generated tree with the same headers as
// the Apache arm, so every arm does the same work. It depends on the standard
// library only, so a module that pins an old quic-go can build it too (go/gquic
// reaches this directory through a symlink; see go/gquic/README.md).
package docroot

import (
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// contentTypes matches Apache's defaults for the files quicbed generates
// (text/html without a charset: Apache's AddDefaultCharset is off).
var contentTypes = map[string]string{
	".html": "text/html",
	".jpg":  "image/jpeg",
	".jpeg": "image/jpeg",
	".json": "application/json",
}

// CacheControl is sent with every response, as by the Apache arm.
const CacheControl = "no-store, no-cache"

// RequestLogger receives one record per request.
type RequestLogger func(r *http.Request, status int, bytes int64, took time.Duration)

// Handler serves files below root: GET and HEAD only, no Last-Modified, no ETag,
// no ranges, no compression, no Alt-Svc.
type Handler struct {
	root string
	log  RequestLogger
}

// NewHandler returns a handler for the document tree at root.
func NewHandler(root string, log RequestLogger) (*Handler, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	return &Handler{root: abs, log: log}, nil
}

func (h *Handler) resolve(urlPath string) (string, bool) {
	clean := path.Clean("/" + urlPath)
	p := filepath.Join(h.root, filepath.FromSlash(clean))
	if st, err := os.Stat(p); err == nil && st.IsDir() {
		p = filepath.Join(p, "index.html")
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", false
	}
	if real != h.root && !strings.HasPrefix(real, h.root+string(filepath.Separator)) {
		return "", false // a symlink out of the tree
	}
	return real, true
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	status, n := h.serve(w, r)
	if h.log != nil {
		h.log(r, status, n, time.Since(start))
	}
}

func (h *Handler) serve(w http.ResponseWriter, r *http.Request) (int, int64) {
	hdr := w.Header()
	hdr.Set("Cache-Control", CacheControl)
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hdr.Set("Allow", "GET, HEAD")
		w.WriteHeader(http.StatusMethodNotAllowed)
		return http.StatusMethodNotAllowed, 0
	}
	p, ok := h.resolve(r.URL.Path)
	if !ok {
		w.WriteHeader(http.StatusNotFound)
		return http.StatusNotFound, 0
	}
	f, err := os.Open(p)
	if err != nil {
		w.WriteHeader(http.StatusNotFound)
		return http.StatusNotFound, 0
	}
	defer func() { _ = f.Close() }() // read-only: nothing is lost if closing fails
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		w.WriteHeader(http.StatusNotFound)
		return http.StatusNotFound, 0
	}
	ct, ok := contentTypes[strings.ToLower(filepath.Ext(p))]
	if !ok {
		ct = "application/octet-stream"
	}
	hdr.Set("Content-Type", ct)
	hdr.Set("Content-Length", strconv.FormatInt(st.Size(), 10))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return http.StatusOK, 0
	}
	n, _ := io.Copy(w, f)
	return http.StatusOK, n
}
