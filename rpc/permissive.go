package rpc

import (
	"bufio"
	"context"
	"net"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// The permissive mode (Security.Permissive) is for the one rolling restart
// that moves a plaintext cluster to TLS: a node serves TLS and plaintext
// on the same port (the first byte of a connection tells them apart), and
// dials TLS first, plaintext when the handshake fails, so that nodes and
// clients not yet moved keep working. Plaintext callers are served as
// before the migration: with a token when they send one, else without
// authorization. It is for the migration only (docs/security.md).

// tlsRecordByte starts every TLS connection (a handshake record); an
// HTTP/2 connection starts with "PRI".
const tlsRecordByte = 0x16

// plaintextInfo is the AuthInfo of a plaintext connection.
type plaintextInfo struct{ credentials.CommonAuthInfo }

func (plaintextInfo) AuthType() string { return "insecure" }

func newPlaintextInfo() plaintextInfo {
	return plaintextInfo{credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}
}

// permissiveCreds wraps TLS credentials with a plaintext fallback on both
// sides.
type permissiveCreds struct {
	credentials.TransportCredentials
}

// ServerHandshake serves TLS when the client starts a TLS handshake, else
// plaintext.
func (c permissiveCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	br := bufio.NewReader(raw)
	b, err := br.Peek(1)
	if err != nil {
		return nil, nil, err
	}
	conn := &bufferedConn{Conn: raw, r: br}
	if b[0] == tlsRecordByte {
		return c.TransportCredentials.ServerHandshake(conn)
	}
	return conn, newPlaintextInfo(), nil
}

// ClientHandshake tries TLS and, when the server does not speak it (it
// closes on the first byte), connects again in plaintext.
func (c permissiveCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, raw)
	if err == nil {
		return conn, info, nil
	}
	_ = raw.Close()
	if ctx.Err() != nil {
		return nil, nil, err
	}
	plain, derr := (&net.Dialer{}).DialContext(ctx, "tcp", raw.RemoteAddr().String())
	if derr != nil {
		return nil, nil, err
	}
	return plain, newPlaintextInfo(), nil
}

func (c permissiveCreds) Clone() credentials.TransportCredentials {
	return permissiveCreds{c.TransportCredentials.Clone()}
}

// bufferedConn reads through the buffer holding the sniffed byte.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// overPlaintext reports whether the call came on a plaintext connection.
func overPlaintext(ctx context.Context) bool {
	pr, ok := peer.FromContext(ctx)
	if !ok {
		return true
	}
	_, isTLS := pr.AuthInfo.(credentials.TLSInfo)
	return !isTLS
}
