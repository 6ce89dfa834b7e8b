package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cohortlabs/cohort/auth"
	"github.com/spf13/cobra"
)

// defaultCertValidity is the validity of a CA and of the certificates
// `certs` issues unless --validity says otherwise.
const defaultCertValidity = 365 * 24 * time.Hour

// The bases of the operator's and the client's certificates `certs dev`
// writes; no node may be named like them (nor like the CA's files).
const (
	devAdminBase  = "admin"
	devClientBase = "client"
)

func newCertsCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "certs",
		Short: "Create a CA and certificates for nodes, operators and clients (no server needed)",
		Long: `Create a certificate authority and the certificates Cohort's TLS uses,
as files: DIR/ca.crt and DIR/ca.key for the CA, DIR/BASE.crt and DIR/BASE.key
for each certificate (keys mode 0600, replaced atomically, so a node that
watches them never reads half a file).

A certificate names its principal in a URI SAN cohort://<role>/<name>:
node/<node-id> for cohortd (its --node-id), admin/<name> for operators,
client/<name> for consumers. Peers are verified by CA and principal, not by
host name; --host adds names and addresses for other tools that check them.

These commands only read and write files; they need no cluster. For
production, any CA whose certificates name principals the same way will do
(cert-manager, Vault; see docs/deploy.md).`,
		// The certs commands work on local files only: they skip the root's
		// checks of the connection flags (and of any credentials those
		// name), so they run before a cluster or its certificates exist.
		PersistentPreRunE: func(*cobra.Command, []string) error { return nil },
	}
	c.AddCommand(certsCACommand(), certsIssueCommand(), certsDevCommand())
	return c
}

func certsCACommand() *cobra.Command {
	var dir string
	var validity time.Duration
	c := &cobra.Command{
		Use:   "ca --dir DIR",
		Short: "Create a CA (ca.crt, ca.key) in DIR; an existing one is never overwritten",
		Args:  cobra.NoArgs,
		Example: `  cohortctl certs ca --dir /etc/cohort/pki
  cohortctl certs ca --dir ./pki --validity 87600h`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkValidity(validity); err != nil {
				return err
			}
			certFile, keyFile := filepath.Join(dir, auth.CACertFile), filepath.Join(dir, auth.CAKeyFile)
			for _, f := range []string{certFile, keyFile} {
				ok, err := exists(f)
				if err != nil {
					return err
				}
				if ok {
					// Replacing a CA orphans every certificate it signed:
					// nodes would refuse each other at the next reload.
					return fmt.Errorf("%s exists: refusing to overwrite the CA in %s (remove ca.crt and ca.key first to make a new one)", f, dir)
				}
			}
			ca, err := createCA(dir, validity)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "created CA %s (key %s), valid until %s\n", certFile, keyFile, ca.Cert.NotAfter.UTC().Format(time.RFC3339))
			return nil
		},
	}
	c.Flags().StringVar(&dir, "dir", "", "directory for ca.crt and ca.key (created if missing)")
	c.Flags().DurationVar(&validity, "validity", defaultCertValidity, "how long the CA is valid")
	_ = c.MarkFlagRequired("dir")
	return c
}

func certsIssueCommand() *cobra.Command {
	var dir, role, name, base string
	var hosts []string
	var validity time.Duration
	c := &cobra.Command{
		Use:   "issue --dir DIR --role node|admin|client --name NAME",
		Short: "Issue a certificate from DIR's CA into DIR/BASE.crt and DIR/BASE.key",
		Long: `Issue a certificate for the principal ROLE/NAME from the CA in DIR (made by
'certs ca') into DIR/BASE.crt and DIR/BASE.key, BASE defaulting to NAME.
Existing files of that BASE are replaced: issuing again is how a certificate
is rotated, and a node re-reads its files when they change. A certificate
never outlives its CA: its validity ends with the CA's at the latest.`,
		Args: cobra.NoArgs,
		Example: `  cohortctl certs issue --dir ./pki --role node --name cohort-1 --host 10.0.0.1,cohort-1.example.com
  cohortctl certs issue --dir ./pki --role admin --name alice
  cohortctl certs issue --dir ./pki --role client --name billing --out billing-2026`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkValidity(validity); err != nil {
				return err
			}
			p := auth.Principal{Role: auth.Role(role), Name: name}
			if err := p.Validate(); err != nil {
				return fmt.Errorf("--role %q --name %q: %w", role, name, err)
			}
			if base == "" {
				base = name
			}
			if err := checkBase(base); err != nil {
				return err
			}
			ca, err := loadCA(dir)
			if err != nil {
				return err
			}
			replacing, err := exists(filepath.Join(dir, base+".crt"))
			if err != nil {
				return err
			}
			leaf, err := issueCert(ca, dir, base, p, hosts, validity)
			if err != nil {
				return err
			}
			verb := "created"
			if replacing {
				verb = "replaced"
			}
			printIssued(cmd.OutOrStdout(), verb, dir, base, p, leaf, "")
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&dir, "dir", "", "directory of the CA (ca.crt, ca.key); the certificate is written there too")
	f.StringVar(&role, "role", "", "the principal's role: node, admin or client")
	f.StringVar(&name, "name", "", "the principal's name: a node's --node-id, an operator's or a client's name")
	f.StringSliceVar(&hosts, "host", nil, "DNS names and IP addresses to add as SANs, comma-separated (for tools that check host names)")
	f.StringVar(&base, "out", "", "file name base: writes DIR/BASE.crt and DIR/BASE.key (default NAME)")
	f.DurationVar(&validity, "validity", defaultCertValidity, "how long the certificate is valid (at most until the CA expires)")
	for _, req := range []string{"dir", "role", "name"} {
		_ = c.MarkFlagRequired(req)
	}
	return c
}

func certsDevCommand() *cobra.Command {
	var dir string
	var nodes, hosts []string
	var validity time.Duration
	c := &cobra.Command{
		Use:   "dev --dir DIR --nodes ID1,ID2,ID3",
		Short: "Create a development PKI in DIR: CA, node, admin and client certificates, each only if missing",
		Long: `Create what a development cluster needs in DIR, leaving what is already
there: the CA (ca.crt, ca.key) if missing; for each node ID a node
certificate ID.crt/ID.key naming node/ID, with the --host names plus
127.0.0.1, ::1, localhost and the ID as SANs; admin.crt/admin.key naming
admin/admin (for cohortctl) and client.crt/client.key naming client/client
(for consumers). It prints what it created.

Running it again creates nothing: a certificate whose files load, chain to
the CA and name the expected principal is kept as it is (delete it to have
it issued again, e.g. with other --host names); one that does not (a
missing key, an expired certificate, one of another CA) is issued again.
The CA's key stays in DIR: this is for development, not production.`,
		Args: cobra.NoArgs,
		Example: `  cohortctl certs dev --dir certs/dev --nodes n1,n2,n3
  cohortctl certs dev --dir /tls --nodes cohort-1,cohort-2,cohort-3 --host docker-host.example`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkValidity(validity); err != nil {
				return err
			}
			type want struct {
				base  string
				p     auth.Principal
				hosts []string
			}
			var wants []want
			seen := map[string]bool{}
			for _, n := range nodes {
				p := auth.Principal{Role: auth.RoleNode, Name: n}
				if err := p.Validate(); err != nil {
					return fmt.Errorf("--nodes: node ID %q: %w", n, err)
				}
				if err := checkBase(n); err != nil {
					return fmt.Errorf("--nodes: node ID %q: %w", n, err)
				}
				if n == devAdminBase || n == devClientBase {
					return fmt.Errorf("--nodes: node ID %q: %s.crt is the %s certificate's file; name the node otherwise", n, n, n)
				}
				if seen[n] {
					return fmt.Errorf("--nodes: node ID %q given twice", n)
				}
				seen[n] = true
				wants = append(wants, want{n, p, nodeHosts(hosts, n)})
			}
			if len(wants) == 0 {
				return errors.New("--nodes: give the node IDs, comma-separated")
			}
			wants = append(wants,
				want{devAdminBase, auth.Principal{Role: auth.RoleAdmin, Name: devAdminBase}, nil},
				want{devClientBase, auth.Principal{Role: auth.RoleClient, Name: devClientBase}, nil})

			out := cmd.OutOrStdout()
			ca, created, err := ensureCA(dir, validity)
			if err != nil {
				return err
			}
			made := 0
			if created {
				made++
				fmt.Fprintf(out, "created CA %s (key %s), valid until %s\n", filepath.Join(dir, auth.CACertFile), filepath.Join(dir, auth.CAKeyFile), ca.Cert.NotAfter.UTC().Format(time.RFC3339))
			}
			for _, w := range wants {
				why, err := staleReason(ca, dir, w.base, w.p)
				if err != nil {
					return err
				}
				if why == "" {
					continue
				}
				leaf, err := issueCert(ca, dir, w.base, w.p, w.hosts, validity)
				if err != nil {
					return err
				}
				made++
				if why == whyMissing {
					printIssued(out, "created", dir, w.base, w.p, leaf, "")
				} else {
					printIssued(out, "replaced", dir, w.base, w.p, leaf, why)
				}
			}
			if made == 0 {
				fmt.Fprintf(out, "nothing to create: the CA and %d certificates in %s are in place\n", len(wants), dir)
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&dir, "dir", "", "directory of the PKI (created if missing)")
	f.StringSliceVar(&nodes, "nodes", nil, "node IDs (cohortd --node-id), comma-separated: one node certificate each")
	f.StringSliceVar(&hosts, "host", nil, "further DNS names and IP addresses for every node certificate, comma-separated")
	f.DurationVar(&validity, "validity", defaultCertValidity, "how long a new CA and new certificates are valid")
	for _, req := range []string{"dir", "nodes"} {
		_ = c.MarkFlagRequired(req)
	}
	return c
}

func checkValidity(d time.Duration) error {
	if d < time.Hour {
		return fmt.Errorf("--validity %s: must be at least 1h", d)
	}
	return nil
}

// checkBase checks a file name base: one plain name in the directory, not
// the CA's.
func checkBase(base string) error {
	switch {
	case base == "" || base == "." || base == "..":
		return fmt.Errorf("file name base %q: want a plain file name", base)
	case strings.ContainsAny(base, `/\`) || filepath.Base(base) != base:
		return fmt.Errorf("file name base %q: want a name in the directory, not a path", base)
	case base+".crt" == auth.CACertFile || base+".key" == auth.CAKeyFile:
		return fmt.Errorf("file name base %q: %s and %s are the CA's files", base, auth.CACertFile, auth.CAKeyFile)
	}
	return nil
}

// nodeHosts are a node certificate's SANs besides its principal: extra,
// then loopback and the node ID, each once.
func nodeHosts(extra []string, node string) []string {
	var out []string
	for _, h := range append(slices.Clone(extra), "127.0.0.1", "::1", "localhost", node) {
		if h = strings.TrimSpace(h); h != "" && !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}

func exists(path string) (bool, error) {
	_, err := os.Lstat(path)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, err
}

func createCA(dir string, validity time.Duration) (*auth.CA, error) {
	ca, err := auth.NewCA("Cohort CA", validity)
	if err != nil {
		return nil, fmt.Errorf("create CA: %w", err)
	}
	if err := ca.Save(dir); err != nil {
		return nil, fmt.Errorf("save CA in %s: %w", dir, err)
	}
	return ca, nil
}

// loadCA reads DIR's CA, which must still be valid.
func loadCA(dir string) (*auth.CA, error) {
	if ok, err := exists(filepath.Join(dir, auth.CACertFile)); err != nil {
		return nil, err
	} else if !ok {
		return nil, fmt.Errorf("no CA in %s (no %s): create one with 'cohortctl certs ca --dir %s'", dir, auth.CACertFile, dir)
	}
	ca, err := auth.LoadCA(dir)
	if err != nil {
		return nil, fmt.Errorf("load CA from %s: %w", dir, err)
	}
	if now := time.Now(); now.After(ca.Cert.NotAfter) {
		return nil, fmt.Errorf("the CA in %s expired at %s: certificates it signs would not verify", dir, ca.Cert.NotAfter.UTC().Format(time.RFC3339))
	}
	return ca, nil
}

// ensureCA loads DIR's CA or, when neither of its files exists, creates
// one. Half a CA is an error: a new CA would orphan the certificates the
// old one signed, so that is the operator's call.
func ensureCA(dir string, validity time.Duration) (ca *auth.CA, created bool, err error) {
	certFile, keyFile := filepath.Join(dir, auth.CACertFile), filepath.Join(dir, auth.CAKeyFile)
	haveCert, err := exists(certFile)
	if err != nil {
		return nil, false, err
	}
	haveKey, err := exists(keyFile)
	if err != nil {
		return nil, false, err
	}
	switch {
	case haveCert && haveKey:
		ca, err := loadCA(dir)
		return ca, false, err
	case haveCert:
		return nil, false, fmt.Errorf("%s exists without its key %s: restore the key, or remove the CA to make a new one", certFile, keyFile)
	case haveKey:
		return nil, false, fmt.Errorf("%s exists without its certificate %s: restore the certificate, or remove the key to make a new CA", keyFile, certFile)
	}
	ca, err = createCA(dir, validity)
	return ca, err == nil, err
}

// whyMissing is staleReason's answer for a certificate not there at all.
const whyMissing = "missing"

// staleReason says why DIR/BASE.crt with its key cannot stay as p's
// certificate from ca ("" when it can): whyMissing when neither file
// exists, else what is wrong with them.
func staleReason(ca *auth.CA, dir, base string, p auth.Principal) (string, error) {
	certFile, keyFile := filepath.Join(dir, base+".crt"), filepath.Join(dir, base+".key")
	haveCert, err := exists(certFile)
	if err != nil {
		return "", err
	}
	haveKey, err := exists(keyFile)
	if err != nil {
		return "", err
	}
	switch {
	case !haveCert && !haveKey:
		return whyMissing, nil
	case !haveKey:
		return "its key " + keyFile + " was missing", nil
	case !haveCert:
		return "only its key " + keyFile + " was there", nil
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return fmt.Sprintf("it did not load: %v", err), nil
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return fmt.Sprintf("it did not verify against the CA in %s: %v", dir, err), nil
	}
	got, err := auth.FromCertificate(pair.Leaf)
	if err != nil {
		return fmt.Sprintf("it names no principal: %v", err), nil
	}
	if got != p {
		return fmt.Sprintf("it named %s", got), nil
	}
	return "", nil
}

// issueCert issues p's certificate into DIR/BASE.crt and .key and returns
// it as written.
func issueCert(ca *auth.CA, dir, base string, p auth.Principal, hosts []string, validity time.Duration) (*x509.Certificate, error) {
	// Past the CA's expiry the certificate would not verify anyway; ending
	// it there makes the date it shows the one that counts.
	validity = min(validity, time.Until(ca.Cert.NotAfter))
	files, err := ca.IssueFiles(dir, base, p, hosts, validity)
	if err != nil {
		return nil, fmt.Errorf("issue the %s certificate %s: %w", p, filepath.Join(dir, base+".crt"), err)
	}
	pair, err := tls.LoadX509KeyPair(files.Cert, files.Key)
	if err != nil {
		return nil, fmt.Errorf("read back %s: %w", files.Cert, err)
	}
	return pair.Leaf, nil
}

func printIssued(w io.Writer, verb, dir, base string, p auth.Principal, leaf *x509.Certificate, why string) {
	fmt.Fprintf(w, "%s %s certificate %s (key %s)", verb, p, filepath.Join(dir, base+".crt"), filepath.Join(dir, base+".key"))
	var sans []string
	for _, ip := range leaf.IPAddresses {
		sans = append(sans, ip.String())
	}
	sans = append(sans, leaf.DNSNames...)
	if len(sans) > 0 {
		fmt.Fprintf(w, ", hosts %s", strings.Join(sans, ","))
	}
	fmt.Fprintf(w, ", valid until %s", leaf.NotAfter.UTC().Format(time.RFC3339))
	if why != "" {
		fmt.Fprintf(w, ": %s", why)
	}
	fmt.Fprintln(w)
}
