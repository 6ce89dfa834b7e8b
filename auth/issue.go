package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority that issues Cohort certificates: what
// `cohortctl certs` and the tests use to make a development PKI. A
// production deployment may use any CA (cert-manager, Vault) whose
// certificates name principals the same way.
type CA struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
}

// NewCA makes a self-signed ECDSA P-256 CA valid for validity.
func NewCA(name string, validity time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"Cohort"}},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

// Issue makes a certificate for p valid for validity, with p's URI SAN,
// CN and OU, usable for both server and client authentication (a node is
// both), and hosts (IP addresses or DNS names) as further SANs for tools
// that check host names. It returns the certificate and key in PEM.
func (ca *CA) Issue(p Principal, hosts []string, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	if err := p.Validate(); err != nil {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: p.Name, OrganizationalUnit: []string{string(p.Role)}, Organization: []string{"Cohort"}},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{p.URI()},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), nil
}

// Paths of a CA directory: ca.crt, ca.key, and <name>.crt/<name>.key for
// each issued certificate.
const (
	CACertFile = "ca.crt"
	CAKeyFile  = "ca.key"
)

// Save writes the CA's certificate and key into dir (the key readable by
// its owner only).
func (ca *CA) Save(dir string) error {
	kder, err := x509.MarshalPKCS8PrivateKey(ca.Key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(dir, CAKeyFile), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, CACertFile), ca.CertPEM, 0o644)
}

// LoadCA reads a CA that Save wrote.
func LoadCA(dir string) (*CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CACertFile))
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, err
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, fmt.Errorf("CA in %s: %s or %s is not PEM", dir, CACertFile, CAKeyFile)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("CA certificate in %s: %w", dir, err)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("CA key in %s: %w", dir, err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, errors.New("CA key: not an ECDSA key")
	}
	return &CA{Cert: cert, Key: key, CertPEM: certPEM}, nil
}

// IssueFiles issues a certificate for p and writes it as dir/<base>.crt and
// dir/<base>.key, each replaced atomically (a node watching them never
// reads half a file). It returns the Files naming them with the CA.
func (ca *CA) IssueFiles(dir, base string, p Principal, hosts []string, validity time.Duration) (Files, error) {
	certPEM, keyPEM, err := ca.Issue(p, hosts, validity)
	if err != nil {
		return Files{}, err
	}
	f := Files{Cert: filepath.Join(dir, base+".crt"), Key: filepath.Join(dir, base+".key"), CA: filepath.Join(dir, CACertFile)}
	// The key first: a reader that sees the new certificate with the old
	// key refuses the pair and tries again at the next change.
	if err := writeFileAtomic(f.Key, keyPEM, 0o600); err != nil {
		return Files{}, err
	}
	if err := writeFileAtomic(f.Cert, certPEM, 0o644); err != nil {
		return Files{}, err
	}
	return f, nil
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
