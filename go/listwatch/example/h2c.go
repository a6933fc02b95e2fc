//go:build go1.24

package main

import "net/http"

// serveH2C lets srv speak HTTP/2 without TLS (prior knowledge, as kube clients and the
// load harness's --h2-streams-per-conn do) beside HTTP/1.1: many watches then share a few
// connections instead of holding a file descriptor each (net/http has had this since 1.24).
func serveH2C(srv *http.Server) bool {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv.Protocols = &p
	return true
}
