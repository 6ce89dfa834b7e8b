package auth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// Files are where a node's or a tool's TLS credentials live: a PEM
// certificate (chain) and its key, and the PEM bundle of CAs that sign the
// certificates it accepts from others.
type Files struct {
	Cert, Key, CA string
}

// Enabled reports whether any file is set.
func (f Files) Enabled() bool { return f.Cert != "" || f.Key != "" || f.CA != "" }

// Validate checks that the set is usable: a CA bundle, and a certificate
// with its key or neither (a tool that authenticates with a token only
// verifies the server).
func (f Files) Validate() error {
	switch {
	case !f.Enabled():
		return nil
	case f.CA == "":
		return errors.New("TLS needs the CA bundle (--tls-ca) that signs the peers' certificates")
	case (f.Cert == "") != (f.Key == ""):
		return errors.New("a certificate (--tls-cert) needs its key (--tls-key), and a key its certificate")
	}
	return nil
}

// Complete reports whether the set has a certificate of its own, as every
// node's must.
func (f Files) Complete() bool { return f.Cert != "" && f.Key != "" && f.CA != "" }

// Credentials are one certificate, its key and a CA pool, replaced
// together by Reload when their files change. Every TLS configuration they
// hand out reads the current ones at each handshake, so a rotation takes
// effect for new connections without a restart and leaves established
// ones alone.
type Credentials struct {
	files Files

	mu     sync.RWMutex
	cert   *tls.Certificate
	self   Principal
	pool   *x509.CertPool
	stamps []stamp
}

// stamp identifies a file's content cheaply enough to poll.
type stamp struct {
	mod  time.Time
	size int64
}

// LoadCredentials reads f. The certificate must match the key, chain to
// one of the CAs and name a principal.
func LoadCredentials(f Files) (*Credentials, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	if !f.Enabled() {
		return nil, errors.New("no TLS files given")
	}
	c := &Credentials{files: f}
	if _, err := c.Reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// Name says what is reloaded, for logs.
func (c *Credentials) Name() string {
	if c.files.Cert == "" {
		return "TLS CA bundle " + c.files.CA
	}
	return "TLS certificate " + c.files.Cert
}

// Principal is the principal the own certificate names.
func (c *Credentials) Principal() Principal {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.self
}

// Leaf is the own certificate in force (nil without one).
func (c *Credentials) Leaf() *x509.Certificate {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.cert == nil {
		return nil
	}
	return c.cert.Leaf
}

func (c *Credentials) current() (*tls.Certificate, *x509.CertPool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.cert, c.pool
}

func statFiles(paths ...string) ([]stamp, error) {
	out := make([]stamp, len(paths))
	for i, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		out[i] = stamp{mod: fi.ModTime(), size: fi.Size()}
	}
	return out, nil
}

func sameStamps(a, b []stamp) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].mod.Equal(b[i].mod) || a[i].size != b[i].size {
			return false
		}
	}
	return true
}

// Reload reads the files again when any changed since the last load. A
// set that does not load (a key that does not match, a certificate that
// no CA of the new bundle signs, a half-written file) is refused with an
// error and the credentials in force stay; changed reports a replacement.
func (c *Credentials) Reload() (changed bool, err error) {
	f := c.files
	paths := []string{f.CA}
	if f.Cert != "" {
		paths = append(paths, f.Cert, f.Key)
	}
	stamps, err := statFiles(paths...)
	if err != nil {
		return false, fmt.Errorf("reload TLS files: %w", err)
	}
	c.mu.RLock()
	same := sameStamps(stamps, c.stamps)
	c.mu.RUnlock()
	if same {
		return false, nil
	}
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		return false, fmt.Errorf("read CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return false, fmt.Errorf("CA bundle %s holds no PEM certificate", f.CA)
	}
	var cert *tls.Certificate
	var self Principal
	if f.Cert != "" {
		kp, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return false, fmt.Errorf("load certificate %s with key %s: %w", f.Cert, f.Key, err)
		}
		if self, err = verifyChain(pool, kp.Leaf, intermediates(kp.Certificate[1:]), x509.ExtKeyUsageAny); err != nil {
			return false, fmt.Errorf("certificate %s (against CA bundle %s): %w", f.Cert, f.CA, err)
		}
		cert = &kp
	}
	c.mu.Lock()
	c.cert, c.pool, c.self, c.stamps = cert, pool, self, stamps
	c.mu.Unlock()
	return true, nil
}

func intermediates(ders [][]byte) *x509.CertPool {
	pool := x509.NewCertPool()
	for _, der := range ders {
		if c, err := x509.ParseCertificate(der); err == nil {
			pool.AddCert(c)
		}
	}
	return pool
}

// verifyChain checks leaf against roots for usage and reads its principal.
func verifyChain(roots *x509.CertPool, leaf *x509.Certificate, inter *x509.CertPool, usage x509.ExtKeyUsage) (Principal, error) {
	if leaf == nil {
		return Principal{}, errors.New("no certificate")
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return Principal{}, err
	}
	return FromCertificate(leaf)
}

// VerifyPeer checks a peer's certificate chain (as the TLS handshake
// presents it) against the current CAs for usage and returns the
// principal it names.
func (c *Credentials) VerifyPeer(certs []*x509.Certificate, usage x509.ExtKeyUsage) (Principal, error) {
	if len(certs) == 0 {
		return Principal{}, errors.New("the peer presented no certificate")
	}
	_, pool := c.current()
	inter := x509.NewCertPool()
	for _, x := range certs[1:] {
		inter.AddCert(x)
	}
	return verifyChain(pool, certs[0], inter, usage)
}

// ServerTLS is the configuration of a TLS listener (the credentials must
// hold a certificate: LoadCredentials of complete Files): the current
// certificate, TLS 1.3, client certificates verified against the current
// CAs (required when requireClientCert, else checked when given). check,
// when not nil, also vets the principal of a client's certificate (a Raft
// listener accepts only the nodes of its configuration).
func (c *Credentials) ServerTLS(requireClientCert bool, check func(Principal) error) *tls.Config {
	auth := tls.VerifyClientCertIfGiven
	if requireClientCert {
		auth = tls.RequireAndVerifyClientCert
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, pool := c.current()
			cfg := &tls.Config{
				MinVersion:   tls.VersionTLS13,
				Certificates: []tls.Certificate{*cert},
				ClientCAs:    pool,
				ClientAuth:   auth,
				NextProtos:   []string{"h2"},
			}
			if check != nil {
				cfg.VerifyConnection = func(cs tls.ConnectionState) error {
					if len(cs.VerifiedChains) == 0 {
						return nil // no certificate given, and none required
					}
					p, err := FromCertificate(cs.VerifiedChains[0][0])
					if err != nil {
						return err
					}
					return check(p)
				}
			}
			return cfg, nil
		},
	}
}

// ClientTLS is the configuration of a TLS dialler presenting the current
// certificate. The server's certificate must chain to the current CAs for
// server authentication and name a principal that check accepts (nil:
// any node). Host names are not checked: the principal is the identity.
func (c *Credentials) ClientTLS(check func(Principal) error) *tls.Config {
	if check == nil {
		check = RequireRole(RoleNode)
	}
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		InsecureSkipVerify: true, // verified in VerifyConnection, by principal instead of host name
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if cert, _ := c.current(); cert != nil {
				return cert, nil
			}
			return &tls.Certificate{}, nil // none: the server decides whether that is enough
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			p, err := c.VerifyPeer(cs.PeerCertificates, x509.ExtKeyUsageServerAuth)
			if err != nil {
				return fmt.Errorf("server certificate: %w", err)
			}
			return check(p)
		},
	}
}

// RequireRole accepts principals of one of roles.
func RequireRole(roles ...Role) func(Principal) error {
	return func(p Principal) error {
		for _, r := range roles {
			if p.Role == r {
				return nil
			}
		}
		return fmt.Errorf("peer is %s, want role %v", p, roles)
	}
}
