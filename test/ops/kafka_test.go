package ops

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/cohortlabs/cohort/client"
	"github.com/cohortlabs/cohort/internal/kafkatest"
	"github.com/cohortlabs/cohort/internal/proc"
)

// kafkaAddrs are the Kafka addresses of the cluster's nodes.
func (c *cluster) kafkaAddrs() []string {
	var out []string
	for _, id := range c.order {
		out = append(out, c.nodes[id].kafka)
	}
	return out
}

// kafkaTLS is the TLS configuration of a Kafka caller with the certificate
// issued as base; with base "" the caller has no certificate (it only
// checks the nodes' certificates against the cluster's CA).
func (c *cluster) kafkaTLS(base string) *tls.Config {
	c.t.Helper()
	if base != "" {
		f := c.files(base)
		tc, err := client.LoadTLS(f.Cert, f.Key, f.CA)
		if err != nil {
			c.t.Fatal(err)
		}
		return tc
	}
	pem, err := os.ReadFile(c.files("admin").CA)
	if err != nil {
		c.t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}
}

// kafkaAdmin is a kadm client of the cluster with a caller's certificate.
func (c *cluster) kafkaAdmin(base string) *kadm.Client {
	return kadm.NewClient(kafkatest.NewClient(c.t, c.kafkaAddrs(), kgo.DialTLSConfig(c.kafkaTLS(base))))
}

// TestProcess_Kafka_MutualTLSAuthorizesAndCommitsSurviveLeaderKill9: three
// cohortd processes with mutual TLS serve Kafka clients over TLS.
//   - The principal of a Kafka client's certificate is authorized by the
//     gRPC front's method table: a client may not create topics, an admin
//     may, and a caller without a certificate may not even describe a group.
//   - kgo consumers with client certificates reach a complete, disjoint
//     assignment and commit.
//   - The Raft leader is killed with SIGKILL. The consumers find the new
//     coordinator, the group's generation does not go back, every
//     acknowledged commit is fetched back, and commits go on.
func TestProcess_Kafka_MutualTLSAuthorizesAndCommitsSurviveLeaderKill9(t *testing.T) {
	c := newSecureCluster(t)
	c.kafka = true
	c.form(3)
	// A new cluster's nodes enter the broker registry in its first second;
	// until the leader's has, FindCoordinator answers
	// COORDINATOR_NOT_AVAILABLE, which would stand in for the refusal below.
	kafkatest.WaitBrokers(t, kafkatest.NewClient(t, c.kafkaAddrs(), kgo.DialTLSConfig(c.kafkaTLS("admin"))), 3)
	adm := c.kafkaAdmin("admin")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	resp, err := c.kafkaAdmin("client").CreateTopic(ctx, 3, 1, nil, "by-client")
	if err == nil {
		err = resp.Err
	}
	if !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("a client creating a topic: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	kafkatest.CreateTopic(t, adm, "orders", 6)
	described, err := c.kafkaAdmin("").DescribeGroups(ctx, "billing")
	if err == nil {
		err = described["billing"].Err
	}
	if !errors.Is(err, kerr.GroupAuthorizationFailed) {
		t.Fatalf("an anonymous caller describing a group: %v, want GROUP_AUTHORIZATION_FAILED", err)
	}

	partitions := map[string]int32{"orders": 6}
	var members []*kafkatest.Member
	for i := range 3 {
		members = append(members, kafkatest.Join(t, c.kafkaAddrs(), fmt.Sprintf("c%d", i), "billing", kgo.CooperativeStickyBalancer(), []string{"orders"},
			kgo.DialTLSConfig(c.kafkaTLS("client"))))
	}
	kafkatest.WaitBalanced(t, adm, "billing", members, partitions)
	acked := kafkatest.Offsets{}
	for _, m := range members {
		kafkatest.Commit(t, m, kafkatest.OwnOffsets(m, 500), acked)
	}
	_, genBefore := members[0].Client.GroupMetadata()

	st, err := c.status()
	if err != nil {
		t.Fatal(err)
	}
	leader := st.GetLeaderId()
	c.kill(leader)
	proc.WaitFor(t, 30*time.Second, "a new leader", func() (bool, string) {
		st, err := c.status()
		if err != nil {
			return false, err.Error()
		}
		return st.GetLeaderId() != "" && st.GetLeaderId() != leader, "leader " + st.GetLeaderId()
	})
	adm = c.kafkaAdmin("admin") // a long-lived kadm keeps a dead coordinator: kafka/kafka_test.go
	if got := kafkatest.FetchOffsets(t, adm, "billing"); !maps.Equal(got, acked) {
		t.Fatalf("after SIGKILL of the leader kadm fetched %v, the members had committed %v", got, acked)
	}
	kafkatest.WaitBalanced(t, adm, "billing", members, partitions)
	for _, m := range members {
		if _, gen := m.Client.GroupMetadata(); gen < genBefore {
			t.Fatalf("%s is at generation %d after the failover, %d before", m.Name, gen, genBefore)
		}
		kafkatest.Commit(t, m, kafkatest.OwnOffsets(m, 900), acked)
	}
	if got := kafkatest.FetchOffsets(t, adm, "billing"); !maps.Equal(got, acked) {
		t.Fatalf("kadm fetched %v, the members committed %v", got, acked)
	}
}

// TestProcess_Kafka_SASLCarriesBearerTokens: on a cluster that authorizes
// by bearer tokens (no TLS, on loopback), Kafka clients authenticate with
// SASL: OAUTHBEARER with the token, or PLAIN with the token as the
// password and the principal's name as the user. The token's principal is
// authorized as on gRPC (a client may consume and commit, not create
// topics; an admin may). A wrong token, a user that is not the token's
// principal, and no SASL at all get no further than a refusal.
func TestProcess_Kafka_SASLCarriesBearerTokens(t *testing.T) {
	const adminToken, clientToken = "kafka-admin-token-0123", "kafka-client-token-4567"
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte(clientToken+",client,client\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, "--admin-token", adminToken, "--token-file", file)
	c.token = adminToken
	c.kafka = true
	c.form(3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	oauthAs := func(tok string) kgo.Opt { return kgo.SASL(oauth.Auth{Token: tok}.AsMechanism()) }
	plainAs := func(user, tok string) kgo.Opt { return kgo.SASL(plain.Auth{User: user, Pass: tok}.AsMechanism()) }
	admin := func(opts ...kgo.Opt) *kadm.Client {
		return kadm.NewClient(kafkatest.NewClient(t, c.kafkaAddrs(), append(opts, kgo.RetryTimeout(5*time.Second))...))
	}

	kafkatest.CreateTopic(t, admin(oauthAs(adminToken)), "orders", 4)
	kafkatest.WaitBrokers(t, kafkatest.NewClient(t, c.kafkaAddrs(), oauthAs(adminToken)), 3)
	resp, err := admin(plainAs("client", clientToken)).CreateTopic(ctx, 1, 1, nil, "by-client")
	if err == nil {
		err = resp.Err
	}
	if !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("a client creating a topic over SASL: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	for name, opt := range map[string]kgo.Opt{
		"a wrong token":                    oauthAs("not-a-token"),
		"a user not the token's principal": plainAs("admin", clientToken),
	} {
		if _, err := admin(opt).ListTopics(ctx); !errors.Is(err, kerr.SaslAuthenticationFailed) {
			t.Fatalf("%s: %v, want SASL_AUTHENTICATION_FAILED", name, err)
		}
	}
	described, err := admin().DescribeGroups(ctx, "billing")
	if err == nil {
		err = described["billing"].Err
	}
	if !errors.Is(err, kerr.GroupAuthorizationFailed) {
		t.Fatalf("describing a group without SASL: %v, want GROUP_AUTHORIZATION_FAILED", err)
	}

	members := []*kafkatest.Member{
		kafkatest.Join(t, c.kafkaAddrs(), "c0", "billing", kgo.RangeBalancer(), []string{"orders"}, plainAs("client", clientToken)),
		kafkatest.Join(t, c.kafkaAddrs(), "c1", "billing", kgo.RangeBalancer(), []string{"orders"}, oauthAs(clientToken)),
	}
	adm := admin(oauthAs(adminToken))
	kafkatest.WaitBalanced(t, adm, "billing", members, map[string]int32{"orders": 4})
	acked := kafkatest.Offsets{}
	for _, m := range members {
		kafkatest.Commit(t, m, kafkatest.OwnOffsets(m, 70), acked)
	}
	if got := kafkatest.FetchOffsets(t, adm, "billing"); !maps.Equal(got, acked) {
		t.Fatalf("kadm fetched %v, the members committed %v", got, acked)
	}
}
