// Package egresstest is what tests of a sandbox's network need on
// loopback: a test CA, origin servers (HTTPS with a leaf of that CA for
// every test domain, plain HTTP) that record what reached them, a PEP 503
// package index serving one small pure-Python wheel built here with
// archive/zip, and the egress resolver's map from the test domains to
// those servers. Nothing here stubs the proxy or the sandbox.
package egresstest
