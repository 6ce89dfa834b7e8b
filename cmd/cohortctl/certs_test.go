package main

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cohortlabs/cohort/auth"
)

// runCerts runs cohortctl with args in-process (no endpoint: certs need
// none) and returns its output.
func runCerts(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func mustCerts(t *testing.T, args ...string) string {
	t.Helper()
	out, err := runCerts(t, args...)
	if err != nil {
		t.Fatalf("cohortctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// checkIssued checks DIR/BASE.crt and .key: the key is mode 0600, the pair
// matches and chains to DIR's CA, and the certificate names want. It
// returns the certificate.
func checkIssued(t *testing.T, dir, base string, want auth.Principal) *x509.Certificate {
	t.Helper()
	files := auth.Files{Cert: filepath.Join(dir, base+".crt"), Key: filepath.Join(dir, base+".key"), CA: filepath.Join(dir, auth.CACertFile)}
	fi, err := os.Stat(files.Key)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: mode %v, want 0600", files.Key, fi.Mode().Perm())
	}
	creds, err := auth.LoadCredentials(files) // key matches, chains to the CA
	if err != nil {
		t.Fatalf("%s: %v", files.Cert, err)
	}
	leaf := creds.Leaf()
	if got, err := auth.FromCertificate(leaf); err != nil || got != want {
		t.Errorf("%s names %v (%v), want %v", files.Cert, got, err, want)
	}
	return leaf
}

func readCertFile(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s: not PEM", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return c
}

func sans(c *x509.Certificate) []string {
	var out []string
	for _, ip := range c.IPAddresses {
		out = append(out, ip.String())
	}
	return append(out, c.DNSNames...)
}

func Test_CertsCA_CreatesOnceAndRefusesToOverwrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	// The root's connection flags are not checked (a zero --timeout would
	// be refused by any command that connects): certs need no cluster.
	out := mustCerts(t, "--timeout", "0s", "certs", "ca", "--dir", dir, "--validity", "48h")
	if !strings.Contains(out, "created CA "+filepath.Join(dir, "ca.crt")) {
		t.Errorf("output %q does not name the CA created", out)
	}
	ca := readCertFile(t, filepath.Join(dir, "ca.crt"))
	if !ca.IsCA {
		t.Error("ca.crt is not a CA certificate")
	}
	fi, err := os.Stat(filepath.Join(dir, "ca.key"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("ca.key: %v, mode %v, want 0600", err, fi.Mode().Perm())
	}
	before, _ := os.ReadFile(filepath.Join(dir, "ca.key"))

	out, err = runCerts(t, "certs", "ca", "--dir", dir)
	if err == nil || !strings.Contains(err.Error(), "refusing to overwrite") || !strings.Contains(err.Error(), dir) {
		t.Fatalf("second ca: err %v (output %q), want a refusal naming %s", err, out, dir)
	}
	// Half a CA is not overwritten either.
	if err := os.Remove(filepath.Join(dir, "ca.crt")); err != nil {
		t.Fatal(err)
	}
	if _, err := runCerts(t, "certs", "ca", "--dir", dir); err == nil || !strings.Contains(err.Error(), "ca.key") {
		t.Fatalf("ca over a lone ca.key: err %v, want a refusal naming ca.key", err)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "ca.key")); !bytes.Equal(before, after) {
		t.Fatal("a refused ca changed ca.key")
	}
	if _, err := runCerts(t, "certs", "ca", "--dir", t.TempDir(), "--validity", "1m"); err == nil || !strings.Contains(err.Error(), "--validity") {
		t.Fatalf("--validity 1m: err %v, want a refusal naming --validity", err)
	}
}

func Test_CertsIssue_EveryRoleChainsToTheCA(t *testing.T) {
	dir := t.TempDir()
	if _, err := runCerts(t, "certs", "issue", "--dir", dir, "--role", "admin", "--name", "alice"); err == nil || !strings.Contains(err.Error(), "no CA in "+dir) {
		t.Fatalf("issue without a CA: err %v, want one naming %s", err, dir)
	}
	mustCerts(t, "certs", "ca", "--dir", dir)

	out := mustCerts(t, "certs", "issue", "--dir", dir, "--role", "node", "--name", "cohort-1", "--host", "10.0.0.1,cohort-1.example.com")
	if !strings.HasPrefix(out, "created node/cohort-1 certificate "+filepath.Join(dir, "cohort-1.crt")) {
		t.Errorf("output %q", out)
	}
	node := checkIssued(t, dir, "cohort-1", auth.Principal{Role: auth.RoleNode, Name: "cohort-1"})
	if got := sans(node); !slices.Equal(got, []string{"10.0.0.1", "cohort-1.example.com"}) {
		t.Errorf("node SANs %v, want the --host ones", got)
	}
	mustCerts(t, "certs", "issue", "--dir", dir, "--role", "admin", "--name", "alice")
	checkIssued(t, dir, "alice", auth.Principal{Role: auth.RoleAdmin, Name: "alice"})
	mustCerts(t, "certs", "issue", "--dir", dir, "--role", "client", "--name", "billing", "--out", "billing-2026")
	checkIssued(t, dir, "billing-2026", auth.Principal{Role: auth.RoleClient, Name: "billing"})
	if _, err := os.Stat(filepath.Join(dir, "billing.crt")); err == nil {
		t.Error("--out was ignored: billing.crt exists")
	}

	// Issuing again rotates: new serial, same principal.
	first := node.SerialNumber
	out = mustCerts(t, "certs", "issue", "--dir", dir, "--role", "node", "--name", "cohort-1")
	if !strings.HasPrefix(out, "replaced ") {
		t.Errorf("second issue: output %q, want it to say the certificate was replaced", out)
	}
	if again := checkIssued(t, dir, "cohort-1", auth.Principal{Role: auth.RoleNode, Name: "cohort-1"}); again.SerialNumber.Cmp(first) == 0 {
		t.Error("issuing again kept the serial")
	}

	caKey, _ := os.ReadFile(filepath.Join(dir, "ca.key"))
	for _, bad := range [][]string{
		{"--role", "root", "--name", "x"},
		{"--role", "admin", "--name", "a/b"},
		{"--role", "admin", "--name", "x", "--out", "ca"},
		{"--role", "admin", "--name", "x", "--out", "../x"},
	} {
		args := append([]string{"certs", "issue", "--dir", dir}, bad...)
		if _, err := runCerts(t, args...); err == nil {
			t.Errorf("%v: accepted", bad)
		}
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "ca.key")); !bytes.Equal(caKey, after) {
		t.Fatal("issue --out ca replaced the CA's key")
	}
}

func Test_CertsDev_CreatesWhatIsMissingOnly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "dev")
	args := []string{"certs", "dev", "--dir", dir, "--nodes", "n1,n2,n3", "--host", "cohort.example,10.1.2.3"}
	out := mustCerts(t, args...)
	if n := strings.Count(out, "created "); n != 6 {
		t.Errorf("first run: %d lines say created, want 6 (CA, 3 nodes, admin, client):\n%s", n, out)
	}
	serials := map[string]*big.Int{}
	for _, n := range []string{"n1", "n2", "n3"} {
		c := checkIssued(t, dir, n, auth.Principal{Role: auth.RoleNode, Name: n})
		want := []string{"10.1.2.3", "127.0.0.1", "::1", "cohort.example", "localhost", n}
		if got := sans(c); !slices.Equal(got, want) {
			t.Errorf("%s SANs %v, want %v", n, got, want)
		}
		serials[n] = c.SerialNumber
	}
	serials["admin"] = checkIssued(t, dir, "admin", auth.Principal{Role: auth.RoleAdmin, Name: "admin"}).SerialNumber
	serials["client"] = checkIssued(t, dir, "client", auth.Principal{Role: auth.RoleClient, Name: "client"}).SerialNumber
	serials["ca"] = readCertFile(t, filepath.Join(dir, "ca.crt")).SerialNumber
	same := func(skip string) {
		t.Helper()
		for base, s := range serials {
			if base == skip {
				continue
			}
			if got := readCertFile(t, filepath.Join(dir, base+".crt")).SerialNumber; got.Cmp(s) != 0 {
				t.Errorf("%s.crt was replaced (serial %v, had %v)", base, got, s)
			}
		}
	}

	out = mustCerts(t, args...)
	if strings.Contains(out, "created") || strings.Contains(out, "replaced") || !strings.Contains(out, "nothing to create") {
		t.Errorf("second run created something:\n%s", out)
	}
	same("")

	// A node whose key is lost gets a new pair; nothing else changes.
	if err := os.Remove(filepath.Join(dir, "n2.key")); err != nil {
		t.Fatal(err)
	}
	out = mustCerts(t, args...)
	if !strings.HasPrefix(out, "replaced node/n2 certificate") || strings.Count(out, "\n") != 1 {
		t.Errorf("run after losing n2.key:\n%s", out)
	}
	if c := checkIssued(t, dir, "n2", auth.Principal{Role: auth.RoleNode, Name: "n2"}); c.SerialNumber.Cmp(serials["n2"]) == 0 {
		t.Error("n2 kept its serial without its key")
	}
	same("n2")

	// A certificate of another CA in the node's place is replaced.
	other := t.TempDir()
	mustCerts(t, "certs", "dev", "--dir", other, "--nodes", "n3")
	for _, ext := range []string{".crt", ".key"} {
		b, err := os.ReadFile(filepath.Join(other, "n3"+ext))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "n3"+ext), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out = mustCerts(t, args...)
	if !strings.HasPrefix(out, "replaced node/n3 certificate") || !strings.Contains(out, "did not verify") {
		t.Errorf("run with a foreign n3:\n%s", out)
	}
	checkIssued(t, dir, "n3", auth.Principal{Role: auth.RoleNode, Name: "n3"})
}

func Test_CertsDev_RefusesNodeIDsThatCollide(t *testing.T) {
	for _, nodes := range []string{"n1,admin", "client", "n1,n1", "ca", "a/b", ".."} {
		dir := t.TempDir()
		if _, err := runCerts(t, "certs", "dev", "--dir", dir, "--nodes", nodes); err == nil {
			t.Errorf("--nodes %s: accepted", nodes)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("--nodes %s: refused but wrote %d files", nodes, len(entries))
		}
	}
	// Half a CA stops dev before it writes anything.
	dir := t.TempDir()
	mustCerts(t, "certs", "ca", "--dir", dir)
	if err := os.Remove(filepath.Join(dir, "ca.key")); err != nil {
		t.Fatal(err)
	}
	if _, err := runCerts(t, "certs", "dev", "--dir", dir, "--nodes", "n1"); err == nil || !strings.Contains(err.Error(), "ca.key") {
		t.Fatalf("dev with a CA without its key: err %v, want one naming ca.key", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "n1.crt")); err == nil {
		t.Fatal("dev issued a certificate without the CA's key")
	}
}
