package cluster

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/cohortlabs/cohort/auth"
	"github.com/cohortlabs/cohort/client"
)

// pkiValidity is how long the run's CA and certificates are valid: far
// longer than any run.
const pkiValidity = 7 * 24 * time.Hour

// Principals of the run's two callers.
var (
	AdminPrincipal  = auth.Principal{Role: auth.RoleAdmin, Name: "chaos-admin"}
	ClientPrincipal = auth.Principal{Role: auth.RoleClient, Name: "chaos-client"}
)

// caller is one caller's credentials: for the Go client, and as the files
// cohortctl reads (zero without TLS).
type caller struct {
	creds client.Credentials
	files auth.Files
}

// ctlArgs are cohortctl's flags for the caller's certificate.
func (c caller) ctlArgs() []string {
	if !c.files.Enabled() {
		return nil
	}
	return []string{"--tls-cert", c.files.Cert, "--tls-key", c.files.Key, "--tls-ca", c.files.CA}
}

// makePKI creates the run's CA in dir, a certificate per node naming
// node/<id> (with the node's address as a SAN, for tools that check host
// names), and the admin and client certificates, and loads the callers'
// credentials.
func (c *Cluster) makePKI(dir string) error {
	ca, err := auth.NewCA("cohort-chaos "+c.prefix, pkiValidity)
	if err != nil {
		return fmt.Errorf("cluster: CA: %w", err)
	}
	if err := ca.Save(dir); err != nil {
		return fmt.Errorf("cluster: CA: %w", err)
	}
	for _, n := range c.Nodes {
		p := auth.Principal{Role: auth.RoleNode, Name: n.ID}
		if _, err := ca.IssueFiles(dir, n.ID, p, []string{n.IP}, pkiValidity); err != nil {
			return fmt.Errorf("cluster: certificate of %s: %w", n.ID, err)
		}
	}
	for _, cl := range []struct {
		to   *caller
		base string
		p    auth.Principal
	}{{&c.admin, "admin", AdminPrincipal}, {&c.client, "client", ClientPrincipal}} {
		f, err := ca.IssueFiles(dir, cl.base, cl.p, nil, pkiValidity)
		if err != nil {
			return fmt.Errorf("cluster: %s certificate: %w", cl.base, err)
		}
		tc, err := client.LoadTLS(f.Cert, f.Key, f.CA)
		if err != nil {
			return fmt.Errorf("cluster: %s credentials: %w", cl.base, err)
		}
		*cl.to = caller{creds: client.Credentials{TLS: tc}, files: f}
	}
	c.pki = dir
	c.log.Info("mutual TLS: CA and certificates made", "dir", dir, "admin", AdminPrincipal, "client", ClientPrincipal)
	return nil
}

// nodeFiles are a node's TLS files (zero without TLS).
func (c *Cluster) nodeFiles(n *Node) auth.Files {
	if c.pki == "" {
		return auth.Files{}
	}
	return auth.Files{Cert: filepath.Join(c.pki, n.ID+".crt"), Key: filepath.Join(c.pki, n.ID+".key"), CA: filepath.Join(c.pki, auth.CACertFile)}
}

// TLS reports whether the cluster runs with mutual TLS.
func (c *Cluster) TLS() bool { return c.pki != "" }

// AdminCredentials are an operator's: cluster operations, topics, commits
// outside a membership, member IDs in DescribeGroups. Plaintext without
// TLS.
func (c *Cluster) AdminCredentials() client.Credentials { return c.admin.creds }

// ClientCredentials are a consumer's: group membership, commits as a
// member, offset reads. Plaintext without TLS.
func (c *Cluster) ClientCredentials() client.Credentials { return c.client.creds }

// CAFile is the PEM file of the run's CA ("" without TLS).
func (c *Cluster) CAFile() string {
	if c.pki == "" {
		return ""
	}
	return filepath.Join(c.pki, auth.CACertFile)
}
