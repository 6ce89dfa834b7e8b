package cluster

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/cohortlabs/cohort/client"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/proc"
)

// A TLS cluster in local mode: the nodes form over mutual TLS, the
// harness finds the leader with the admin credential, cohortctl runs with
// the admin certificate, an admin may create a topic and a client may not,
// and a plaintext caller gets nowhere.
func TestCluster_TLS_CredentialsForEachRole(t *testing.T) {
	if testing.Short() {
		t.Skip("starts cohortd processes")
	}
	var builds proc.Builds
	defer builds.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bins, err := builds.Build(ctx, "github.com/cohortlabs/cohort/cmd/cohortd", "github.com/cohortlabs/cohort/cmd/cohortctl")
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Mode: ModeLocal, Nodes: 3, Instance: 199, Binary: bins[0], CtlBinary: bins[1],
		LogDir: filepath.Join(t.TempDir(), "logs"), TLS: true, Logger: slog.New(slog.DiscardHandler),
		ExtraArgs: []string{"--shutdown-timeout", "5s"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			for _, n := range c.Nodes {
				if b, err := os.ReadFile(n.LogPath); err == nil {
					t.Logf("%s:\n%s", n.ID, b)
				}
			}
		}
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}()
	if !c.TLS() || c.CAFile() == "" || c.AdminCredentials().TLS == nil || c.ClientCredentials().TLS == nil {
		t.Fatal("a TLS cluster without credentials for its callers")
	}
	if _, err := c.WaitLeaderAfterStart(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		if a := strings.Join(c.args(n), " "); !strings.Contains(a, "--tls-cert "+filepath.Join(c.pki, n.ID+".crt")) || strings.Contains(a, "--insecure") {
			t.Fatalf("%s runs with %s", n.ID, a)
		}
	}
	// Every node listens for Kafka clients on a port of its own.
	kafka := map[string]bool{}
	for i, addr := range c.KafkaEndpoints() {
		n := c.Nodes[i]
		if addr == "" || kafka[addr] || addr == n.RaftAddr || addr == n.GRPCAddr || addr == n.HTTPAddr {
			t.Fatalf("%s: Kafka address %q is empty or shared (endpoints %v)", n.ID, addr, c.KafkaEndpoints())
		}
		kafka[addr] = true
		conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("%s: no Kafka listener on %s: %v", n.ID, addr, err)
		}
		conn.Close()
	}

	out, err := c.Ctl(ctx, "cluster", "peers", "-o", "json")
	if err != nil {
		t.Fatalf("cohortctl with the admin certificate: %v", err)
	}
	for _, n := range c.Nodes {
		if !strings.Contains(out, `"`+n.ID+`"`) {
			t.Fatalf("cohortctl cluster peers does not list %s: %s", n.ID, out)
		}
	}

	create := func(creds client.Credentials, name string) error {
		conn, err := client.Dial(client.ConnConfig{Endpoints: c.Endpoints(), Credentials: creds, RequestTimeout: 5 * time.Second})
		if err != nil {
			return err
		}
		defer conn.Close()
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		defer ccancel()
		_, err = conn.Topics().CreateTopic(cctx, &cohortv1.CreateTopicRequest{Name: name, Partitions: 1})
		return err
	}
	if err := create(c.AdminCredentials(), "by-admin"); err != nil {
		t.Fatalf("CreateTopic as admin: %v", err)
	}
	if err := create(c.ClientCredentials(), "by-client"); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("CreateTopic as client: %v, want PermissionDenied", err)
	}

	plain, err := grpc.NewClient(c.Nodes[0].GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	defer pcancel()
	if _, err := cohortv1.NewClusterServiceClient(plain).NodeInfo(pctx, &cohortv1.NodeInfoRequest{}); err == nil {
		t.Fatal("a plaintext caller got an answer from a TLS node")
	}
}
