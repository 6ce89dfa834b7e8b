package client

import (
	"context"
	"crypto/tls"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cohortlabs/cohort/auth"
)

// Credentials are how a client proves who it is to a cluster that
// authorizes calls (cohortd with --tls-* or --token-file): TLS with a
// client certificate, or a bearer token (over TLS when not on loopback),
// or both. The zero value is plaintext without a credential, what a
// development cluster on loopback accepts.
type Credentials struct {
	// TLS, when set, is the connection's TLS configuration: LoadTLS builds
	// one from PEM files.
	TLS *tls.Config
	// Token, when set, is sent as "authorization: Bearer <token>".
	Token string
}

// LoadTLS is the TLS configuration of a client from PEM files: the CA
// bundle that signs the nodes' certificates, and the client's own
// certificate and key (both empty for a client that authenticates with a
// token). A node is recognised by its certificate's principal
// (cohort://node/<id>) signed by the CA, not by host name, so every
// address a node is reached at works.
func LoadTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	creds, err := auth.LoadCredentials(auth.Files{Cert: certFile, Key: keyFile, CA: caFile})
	if err != nil {
		return nil, err
	}
	return creds.ClientTLS(nil), nil
}

// DialOptions are the gRPC options that carry c.
func (c Credentials) DialOptions() []grpc.DialOption {
	tc := insecure.NewCredentials()
	if c.TLS != nil {
		tc = credentials.NewTLS(c.TLS)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(tc)}
	if c.Token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer(c.Token)))
	}
	return opts
}

// bearer sends a token on every call. It does not require TLS: a node
// refuses plaintext away from loopback itself.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }
