package auth

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func Test_FromCertificate_ReadsURIThenSubject(t *testing.T) {
	ca, err := NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, _, err := ca.Issue(Principal{RoleNode, "n1"}, []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c := parsePEM(t, certPEM)
	if p, err := FromCertificate(c); err != nil || p != (Principal{RoleNode, "n1"}) {
		t.Fatalf("URI SAN: got %v, %v", p, err)
	}
	c.URIs = nil
	if p, err := FromCertificate(c); err != nil || p != (Principal{RoleNode, "n1"}) {
		t.Fatalf("subject: got %v, %v", p, err)
	}
	c.Subject.OrganizationalUnit = []string{"ops"}
	if _, err := FromCertificate(c); err != ErrNoPrincipal {
		t.Fatalf("no principal: got %v", err)
	}
}

func Test_ParsePrincipal_RefusesBadNames(t *testing.T) {
	for _, s := range []string{"node", "root/x", "admin/", "node/a/b", "client/a,b", "client/" + strings.Repeat("x", 200)} {
		if _, err := ParsePrincipal(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
	if p, err := ParsePrincipal("admin/alice"); err != nil || p.String() != "admin/alice" {
		t.Fatalf("admin/alice: %v %v", p, err)
	}
}

// Test_Credentials_ReloadReplacesAndRefusesMismatch rotates a node's
// certificate: the new one is served to the next handshake; a key that
// does not match its certificate is refused and the old pair stays.
func Test_Credentials_ReloadReplacesAndRefusesMismatch(t *testing.T) {
	dir := t.TempDir()
	ca, err := NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Save(dir); err != nil {
		t.Fatal(err)
	}
	files, err := ca.IssueFiles(dir, "n1", Principal{RoleNode, "n1"}, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := LoadCredentials(files)
	if err != nil {
		t.Fatal(err)
	}
	first := creds.Leaf().SerialNumber
	if changed, err := creds.Reload(); changed || err != nil {
		t.Fatalf("reload of unchanged files: changed=%v err=%v", changed, err)
	}
	served := func() *x509.Certificate {
		cs, _ := handshake(t, creds.ServerTLS(true, nil), creds.ClientTLS(nil))
		return cs.PeerCertificates[0]
	}
	if got := served().SerialNumber; got.Cmp(first) != 0 {
		t.Fatalf("served serial %v, want %v", got, first)
	}
	time.Sleep(10 * time.Millisecond) // time passes: the next write must get a later mtime on coarse clocks
	if _, err := ca.IssueFiles(dir, "n1", Principal{RoleNode, "n1"}, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	if changed, err := creds.Reload(); !changed || err != nil {
		t.Fatalf("reload of new files: changed=%v err=%v", changed, err)
	}
	second := creds.Leaf().SerialNumber
	if second.Cmp(first) == 0 || served().SerialNumber.Cmp(second) != 0 {
		t.Fatal("the rotated certificate is not served")
	}
	// A key of another certificate: refused, the pair in force stays.
	other, err := ca.IssueFiles(dir, "other", Principal{RoleNode, "n2"}, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(other.Key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files.Key, key, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := creds.Reload(); err == nil || !strings.Contains(err.Error(), files.Cert) {
		t.Fatalf("mismatched key: err %v, want one naming %s", err, files.Cert)
	}
	if creds.Leaf().SerialNumber.Cmp(second) != 0 {
		t.Fatal("a refused reload replaced the certificate")
	}
}

// Test_TLS_RefusesForeignCAAndWrongRole: a certificate from another CA,
// and one of the wrong role, do not get through a handshake.
func Test_TLS_RefusesForeignCAAndWrongRole(t *testing.T) {
	dir, foreignDir := t.TempDir(), t.TempDir()
	ca, _ := NewCA("test", time.Hour)
	foreign, _ := NewCA("foreign", time.Hour)
	if err := ca.Save(dir); err != nil {
		t.Fatal(err)
	}
	if err := foreign.Save(foreignDir); err != nil {
		t.Fatal(err)
	}
	nodeFiles, _ := ca.IssueFiles(dir, "n1", Principal{RoleNode, "n1"}, nil, time.Hour)
	clientFiles, _ := ca.IssueFiles(dir, "c", Principal{RoleClient, "c"}, nil, time.Hour)
	intruderFiles, _ := foreign.IssueFiles(foreignDir, "n1", Principal{RoleNode, "n1"}, nil, time.Hour)
	node, err := LoadCredentials(nodeFiles)
	if err != nil {
		t.Fatal(err)
	}
	client, _ := LoadCredentials(clientFiles)
	intruder, _ := LoadCredentials(intruderFiles)

	if _, err := handshake(t, node.ServerTLS(true, nil), intruder.ClientTLS(nil)); err == nil {
		t.Fatal("a client certificate of a foreign CA was accepted")
	}
	if _, err := handshake(t, intruder.ServerTLS(true, nil), node.ClientTLS(nil)); err == nil {
		t.Fatal("a server certificate of a foreign CA was accepted")
	}
	if _, err := handshake(t, client.ServerTLS(true, nil), node.ClientTLS(nil)); err == nil {
		t.Fatal("a client certificate was accepted as a node's server certificate")
	}
	onlyNodes := RequireRole(RoleNode)
	if _, err := handshake(t, node.ServerTLS(true, onlyNodes), client.ClientTLS(nil)); err == nil {
		t.Fatal("the server's principal check let a client in")
	}
	if _, err := handshake(t, node.ServerTLS(true, onlyNodes), node.ClientTLS(nil)); err != nil {
		t.Fatalf("node to node: %v", err)
	}
}

func Test_Tokens_LookupReloadAndRefuseBadLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("# comment\n\naaaaaaaaaaaaaaaaaaaa,admin,alice\nbbbbbbbbbbbbbbbbbbbb,node,n1\n")
	toks, err := NewTokens(path, map[string]Principal{"ssssssssssssssssssss": {RoleAdmin, "admin"}})
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := toks.Lookup("aaaaaaaaaaaaaaaaaaaa"); !ok || p != (Principal{RoleAdmin, "alice"}) {
		t.Fatalf("alice: %v %v", p, ok)
	}
	if _, ok := toks.Lookup("aaaaaaaaaaaaaaaaaaab"); ok {
		t.Fatal("a wrong token was accepted")
	}
	if got := toks.TokenFor(Principal{RoleNode, "n1"}); got != "bbbbbbbbbbbbbbbbbbbb" {
		t.Fatalf("node token %q", got)
	}
	time.Sleep(10 * time.Millisecond) // time passes: a later mtime for the rewrite
	write("cccccccccccccccccccc,client,billing\n")
	if changed, err := toks.Reload(); !changed || err != nil {
		t.Fatalf("reload: %v %v", changed, err)
	}
	if _, ok := toks.Lookup("aaaaaaaaaaaaaaaaaaaa"); ok {
		t.Fatal("a token removed from the file still works")
	}
	if _, ok := toks.Lookup("ssssssssssssssssssss"); !ok {
		t.Fatal("the static token was lost on reload")
	}
	for _, bad := range []string{"short,admin,x\n", "cccccccccccccccccccc,root,x\n", "cccccccccccccccccccc,admin\n"} {
		time.Sleep(10 * time.Millisecond) // time passes: a later mtime for the rewrite
		write(bad)
		if _, err := toks.Reload(); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("%q: err %v, want one naming line 1", bad, err)
		}
	}
	if _, ok := toks.Lookup("cccccccccccccccccccc"); !ok {
		t.Fatal("a refused reload dropped the tokens in force")
	}
}

func parsePEM(t *testing.T, b []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatal("not PEM")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// handshake runs a TLS handshake between server and client configurations
// over a pipe and returns the client's view; the error is the first side's.
func handshake(t *testing.T, server, client *tls.Config) (tls.ConnectionState, error) {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	srvErr := make(chan error, 1)
	go func() {
		s := tls.Server(a, server)
		err := s.Handshake()
		if err == nil {
			// TLS 1.3: the client's certificate is checked after the
			// client's handshake returns; a read surfaces the verdict.
			_, err = s.Write([]byte{1})
		}
		srvErr <- err
		_ = a.Close()
	}()
	c := tls.Client(b, client)
	err := c.Handshake()
	if err == nil {
		_, err = c.Read(make([]byte, 1))
	}
	if serr := <-srvErr; err == nil {
		err = serr
	}
	return c.ConnectionState(), err
}
