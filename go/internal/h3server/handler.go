// Package h3server is quicbed's HTTP/3 static file server: the QUIC arm of a
// page-load comparison. It serves the same generated tree with the same headers as
// the Apache arm, so the two servers do the same work.
package h3server

import "quicbed/internal/docroot"

// The handler lives in package docroot, shared with the gQUIC server (go/gquic);
// these names keep h3server's API.

// CacheControl is sent with every response, as by the Apache arm.
const CacheControl = docroot.CacheControl

// RequestLogger receives one record per request.
type RequestLogger = docroot.RequestLogger

// Handler serves files below a root: GET and HEAD only, no Last-Modified, no
// ETag, no ranges, no compression, no Alt-Svc.
type Handler = docroot.Handler

// NewHandler returns a handler for the document tree at root.
func NewHandler(root string, log RequestLogger) (*Handler, error) {
	return docroot.NewHandler(root, log)
}
