//go:build !go1.24

package main

import "net/http"

// serveH2C: Go before 1.24 has no unencrypted HTTP/2 in net/http; HTTP/1.1 only.
func serveH2C(*http.Server) bool { return false }
