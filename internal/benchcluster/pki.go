package benchcluster

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cohortlabs/cohort/auth"
)

// pkiValidity is how long a benchmark's CA and certificates are valid: a
// run is bounded well below it.
const pkiValidity = 24 * time.Hour

// The principals of the callers' certificates.
var (
	AdminPrincipal  = auth.Principal{Role: auth.RoleAdmin, Name: "bench-admin"}
	ClientPrincipal = auth.Principal{Role: auth.RoleClient, Name: "bench-client"}
)

// PKI is a throwaway certificate authority for one benchmark cluster, in
// a directory: ca.crt and ca.key, admin.crt (AdminPrincipal: topics,
// member-less commits, TransferLeadership), client.crt (ClientPrincipal:
// group members) and a node/<id> certificate per node, issued by Node
// when a cluster starts with it. Nothing in it outlives the run.
type PKI struct {
	dir string
	ca  *auth.CA
}

// NewPKI makes a CA and the admin and client certificates in dir.
func NewPKI(dir string) (*PKI, error) {
	ca, err := auth.NewCA("cohort-bench CA", pkiValidity)
	if err != nil {
		return nil, fmt.Errorf("benchmark CA: %w", err)
	}
	if err := ca.Save(dir); err != nil {
		return nil, fmt.Errorf("save the benchmark CA in %s: %w", dir, err)
	}
	p := &PKI{dir: dir, ca: ca}
	for _, pr := range []auth.Principal{AdminPrincipal, ClientPrincipal} {
		if _, err := ca.IssueFiles(dir, string(pr.Role), pr, []string{"127.0.0.1"}, pkiValidity); err != nil {
			return nil, fmt.Errorf("issue the %s certificate: %w", pr, err)
		}
	}
	return p, nil
}

// Dir is where the PKI's files are.
func (p *PKI) Dir() string { return p.dir }

func (p *PKI) files(base string) auth.Files {
	return auth.Files{
		Cert: filepath.Join(p.dir, base+".crt"),
		Key:  filepath.Join(p.dir, base+".key"),
		CA:   filepath.Join(p.dir, auth.CACertFile),
	}
}

// Admin are the admin certificate's files.
func (p *PKI) Admin() auth.Files { return p.files(string(auth.RoleAdmin)) }

// Client are the client certificate's files.
func (p *PKI) Client() auth.Files { return p.files(string(auth.RoleClient)) }

// Node issues (again, if it exists) the certificate of node id, naming
// node/<id> with 127.0.0.1 as a SAN, and returns its files.
func (p *PKI) Node(id string) (auth.Files, error) {
	f, err := p.ca.IssueFiles(p.dir, "node-"+id, auth.Principal{Role: auth.RoleNode, Name: id}, []string{"127.0.0.1"}, pkiValidity)
	if err != nil {
		return auth.Files{}, fmt.Errorf("issue node %s's certificate: %w", id, err)
	}
	return f, nil
}

// DialOptions are the gRPC options of a caller presenting the certificate
// of f and verifying that the server is a node; plaintext for empty f.
func DialOptions(f auth.Files) ([]grpc.DialOption, error) {
	if !f.Enabled() {
		return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, nil
	}
	if !f.Complete() {
		return nil, errors.New("benchcluster: TLS needs a certificate, its key and the CA bundle")
	}
	creds, err := auth.LoadCredentials(f)
	if err != nil {
		return nil, err
	}
	return []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(creds.ClientTLS(nil)))}, nil
}
