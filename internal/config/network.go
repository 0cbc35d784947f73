package config

import (
	"crypto/x509"
	"fmt"
	"os"

	"github.com/codeinterp/codeinterp/internal/egress"
)

// EgressConfig maps sandbox.network onto the egress proxy's bound, reading
// ca_file. The PEM it read is returned too: a networked sandbox trusts it
// as well (gvisor.Config.ExtraCAPEM), for a private mirror it reaches
// through the proxy's tunnel.
func (c *Config) EgressConfig() (egress.Config, []byte, error) {
	n := c.Sandbox.Network
	ec := egress.Config{
		AllowedDomains: append([]string(nil), n.AllowedDomains...),
		MaxDomains:     n.MaxDomains,
		MaxBytes:       int64(n.MaxBytes),
		MaxConns:       n.MaxConnections,
		Resolve:        map[string]string{},
		DialTimeout:    n.DialTimeout,
		IdleTimeout:    n.IdleTimeout,
	}
	for k, v := range n.Resolve {
		ec.Resolve[k] = v
	}
	if n.CAFile == "" {
		return ec, nil, nil
	}
	pem, err := os.ReadFile(n.CAFile)
	if err != nil {
		return egress.Config{}, nil, fmt.Errorf("sandbox.network.ca_file: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return egress.Config{}, nil, fmt.Errorf("sandbox.network.ca_file: %s holds no PEM certificate", n.CAFile)
	}
	ec.RootCAs = pool
	return ec, pem, nil
}
