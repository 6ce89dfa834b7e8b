package kafka

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohortlabs/cohort/auth"
)

// SASL carries Cohort's bearer tokens (--token-file, --admin-token) for
// Kafka clients, on a node that accepts tokens:
//   - OAUTHBEARER (RFC 7628, Kafka's KIP-255): the token is the bearer
//     token, as a gRPC caller's authorization header carries it;
//   - PLAIN: the password is the token; a user name, when given, must be
//     the token's principal's name (client, admin, ...), so that what a
//     client's configuration says matches who the node believes it is.
//
// A connection that authenticates is its token's principal from then on
// (over a TLS client certificate's). A failed authentication is answered
// and the connection closed, as Kafka's brokers do: each guess at a token
// costs a new connection (and, off loopback, a TLS handshake). A connection
// that never authenticates is anonymous, as a caller without credentials
// is on gRPC. Re-authentication (KIP-368) is
// not offered: the session lifetime answered is 0, and a token removed from
// the file stops opening new connections, not those already open.
const (
	mechOAuthBearer = "OAUTHBEARER"
	mechPlain       = "PLAIN"
)

var mechanisms = []string{mechOAuthBearer, mechPlain}

// saslHandshake chooses the connection's mechanism.
func (c *call) saslHandshake(r *kmsg.SASLHandshakeRequest) kmsg.Response {
	resp := kmsg.NewPtrSASLHandshakeResponse()
	if c.s.cfg.Security.Tokens == nil {
		resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		return resp // no mechanism: this node accepts no tokens
	}
	resp.SupportedMechanisms = mechanisms
	if !slices.Contains(mechanisms, r.Mechanism) {
		resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		return resp
	}
	c.c.mechanism = r.Mechanism
	return resp
}

// saslAuthenticate checks the credential of the chosen mechanism.
func (c *call) saslAuthenticate(r *kmsg.SASLAuthenticateRequest) kmsg.Response {
	resp := kmsg.NewPtrSASLAuthenticateResponse()
	mech := c.c.mechanism
	c.c.mechanism = "" // one exchange per handshake
	if mech == "" {
		resp.ErrorCode, resp.ErrorMessage = kerr.IllegalSaslState.Code, ptr("SaslAuthenticate before a SaslHandshake chose a mechanism")
		return resp
	}
	p, err := c.s.saslPrincipal(mech, r.SASLAuthBytes)
	if err != nil {
		c.s.log.Info("kafka SASL authentication refused", "remote", c.c.nc.RemoteAddr(), "mechanism", mech, "err", err)
		resp.ErrorCode, resp.ErrorMessage = kerr.SaslAuthenticationFailed.Code, ptr(err.Error())
		c.c.closing = true
		return resp
	}
	c.c.principal = p
	return resp
}

// saslPrincipal is the principal a mechanism's message authenticates.
func (s *Server) saslPrincipal(mech string, msg []byte) (auth.Principal, error) {
	var token, user string
	var err error
	switch mech {
	case mechOAuthBearer:
		token, err = oauthBearerToken(msg)
	case mechPlain:
		user, token, err = plainCredentials(msg)
	}
	if err != nil {
		return auth.Principal{}, err
	}
	p, ok := s.cfg.Security.Tokens.Lookup(token)
	switch {
	case !ok:
		return auth.Principal{}, errors.New("token not recognized (not in --token-file, not the --admin-token)")
	case user != "" && user != p.Name:
		return auth.Principal{}, fmt.Errorf("user %q is not the token's principal (%s)", user, p)
	}
	return p, nil
}

// oauthBearerToken reads RFC 7628's client initial response: a GS2 header
// ("n,," or "n,a=<authzid>,"), then key=value pairs separated by 0x01, one
// of them auth=Bearer <token>, ended by two 0x01.
func oauthBearerToken(msg []byte) (string, error) {
	header, rest, ok := bytes.Cut(msg, []byte{1})
	if !ok || !bytes.HasPrefix(header, []byte("n,")) {
		return "", errors.New("OAUTHBEARER: not a client initial response (want a GS2 header n,,)")
	}
	for kv := range strings.SplitSeq(string(rest), "\x01") {
		if v, ok := strings.CutPrefix(kv, "auth="); ok {
			tok, err := auth.ParseBearer(v)
			if err != nil {
				return "", fmt.Errorf("OAUTHBEARER: auth is not \"Bearer <token>\"")
			}
			return tok, nil
		}
	}
	return "", errors.New("OAUTHBEARER: no auth=Bearer <token> in the message")
}

// plainCredentials reads RFC 4616's message: authzid, user and password
// separated by NUL.
func plainCredentials(msg []byte) (user, password string, err error) {
	parts := strings.Split(string(msg), "\x00")
	if len(parts) != 3 || parts[2] == "" {
		return "", "", errors.New("PLAIN: want authzid NUL user NUL password, with the token as the password")
	}
	if parts[0] != "" && parts[0] != parts[1] {
		return "", "", fmt.Errorf("PLAIN: acting as another user (%q) is not supported", parts[0])
	}
	return parts[1], parts[2], nil
}
