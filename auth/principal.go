package auth

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Role is what a principal may do, decided by the rpc package.
type Role string

// The roles. A node runs cohortd (node-to-node calls, and calls it
// forwards on behalf of others); an admin operates the cluster; a client
// is a consumer (group membership and commits).
const (
	RoleNode   Role = "node"
	RoleAdmin  Role = "admin"
	RoleClient Role = "client"
)

// Roles are the roles a credential may name.
var Roles = []Role{RoleNode, RoleAdmin, RoleClient}

func validRole(r Role) bool {
	for _, x := range Roles {
		if r == x {
			return true
		}
	}
	return false
}

// URIScheme is the scheme of the SAN URI naming a principal.
const URIScheme = "cohort"

// maxNameBytes bounds a principal's name: it becomes log fields and
// metadata on forwarded calls.
const maxNameBytes = 128

// Principal is an authenticated caller. The zero value is the anonymous
// caller.
type Principal struct {
	Role Role
	Name string
}

// Anonymous reports whether p carries no credential.
func (p Principal) Anonymous() bool { return p.Role == "" }

// String is "role/name", or "anonymous".
func (p Principal) String() string {
	if p.Anonymous() {
		return "anonymous"
	}
	return string(p.Role) + "/" + p.Name
}

// URI is the SAN URI naming p in a certificate: cohort://role/name.
func (p Principal) URI() *url.URL {
	return &url.URL{Scheme: URIScheme, Host: string(p.Role), Path: "/" + p.Name}
}

// Validate checks that p names a known role and a usable name.
func (p Principal) Validate() error {
	if !validRole(p.Role) {
		return fmt.Errorf("role %q: must be one of node, admin, client", p.Role)
	}
	switch {
	case p.Name == "":
		return fmt.Errorf("%s principal: empty name", p.Role)
	case len(p.Name) > maxNameBytes:
		return fmt.Errorf("%s principal: name of %d bytes, at most %d", p.Role, len(p.Name), maxNameBytes)
	case strings.ContainsAny(p.Name, "/\x00\n\r,"):
		return fmt.Errorf("%s principal %q: the name may not contain '/', ',' or control characters", p.Role, p.Name)
	}
	return nil
}

// ParsePrincipal reads "role/name" (String's form).
func ParsePrincipal(s string) (Principal, error) {
	role, name, ok := strings.Cut(s, "/")
	if !ok {
		return Principal{}, fmt.Errorf("principal %q: want role/name", s)
	}
	p := Principal{Role: Role(role), Name: name}
	return p, p.Validate()
}

// ErrNoPrincipal is returned for a certificate that names no principal.
var ErrNoPrincipal = errors.New("certificate names no cohort principal: want a URI SAN cohort://<role>/<name> or a subject with OU=<role>, CN=<name>")

// FromCertificate reads the principal a certificate names: its first
// cohort:// URI SAN, else its subject's OU (role) and CN (name). The
// certificate's chain must have been verified by the caller.
func FromCertificate(c *x509.Certificate) (Principal, error) {
	for _, u := range c.URIs {
		if u.Scheme != URIScheme {
			continue
		}
		p := Principal{Role: Role(u.Host), Name: strings.TrimPrefix(u.Path, "/")}
		if err := p.Validate(); err != nil {
			return Principal{}, fmt.Errorf("certificate SAN %s: %w", u, err)
		}
		return p, nil
	}
	for _, ou := range c.Subject.OrganizationalUnit {
		if validRole(Role(ou)) {
			p := Principal{Role: Role(ou), Name: c.Subject.CommonName}
			if err := p.Validate(); err != nil {
				return Principal{}, fmt.Errorf("certificate subject %q: %w", c.Subject, err)
			}
			return p, nil
		}
	}
	return Principal{}, ErrNoPrincipal
}

type principalKey struct{}

// NewContext returns ctx carrying p.
func NewContext(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext is the principal NewContext put in ctx (anonymous if none).
func FromContext(ctx context.Context) Principal {
	p, _ := ctx.Value(principalKey{}).(Principal)
	return p
}
