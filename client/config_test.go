package client

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cohortlabs/cohort/errcode"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

func TestConfig_Defaults(t *testing.T) {
	c := Config{Endpoints: []string{"127.0.0.1:9001"}, GroupID: "g", Topics: []string{"t"}}.withDefaults()
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	if c.SessionTimeout != 10*time.Second || c.RebalanceTimeout != 30*time.Second || c.HeartbeatInterval != c.SessionTimeout/3 ||
		c.RequestTimeout != DefaultRequestTimeout || c.RetryBackoffMin != DefaultRetryBackoffMin || c.RetryBackoffMax != DefaultRetryBackoffMax ||
		c.ProtocolType != "consumer" || strings.Join(c.Protocols, ",") != "roundrobin,range" || c.Logger == nil {
		t.Fatalf("defaults: %+v", c)
	}
}

func TestConfig_Validation_NamesTheField(t *testing.T) {
	base := func() Config {
		return Config{Endpoints: []string{"127.0.0.1:9001"}, GroupID: "g", Topics: []string{"t"}}
	}
	cases := []struct {
		field  string
		modify func(*Config)
	}{
		{"Endpoints", func(c *Config) { c.Endpoints = nil }},
		{"Endpoints[1]", func(c *Config) { c.Endpoints = append(c.Endpoints, "") }},
		{"GroupID", func(c *Config) { c.GroupID = "" }},
		{"Topics", func(c *Config) { c.Topics = nil }},
		{"Topics[0]", func(c *Config) { c.Topics = []string{""} }},
		{"Protocols", func(c *Config) { c.Protocols = []string{"fastest"} }},
		{"ServerSideAssignor", func(c *Config) { c.ServerSideAssignor = "cooperative-sticky" }},
		{"ServerSideAssignor", func(c *Config) { c.ServerSideAssignor = "fastest" }},
		{"ProtocolType", func(c *Config) { c.ServerSideAssignor, c.ProtocolType = "sticky", "consumer" }},
		{"Protocols", func(c *Config) { c.ServerSideAssignor, c.Protocols = "sticky", []string{"range"} }},
		{"Protocols", func(c *Config) { c.Protocols = []string{"range", "range"} }},
		{"HeartbeatInterval", func(c *Config) { c.SessionTimeout, c.HeartbeatInterval = 3*time.Second, 3*time.Second }},
		{"SessionTimeout", func(c *Config) { c.SessionTimeout = -time.Second }},
		{"RetryBackoffMin/Max", func(c *Config) { c.RetryBackoffMin, c.RetryBackoffMax = time.Second, time.Millisecond }},
		{"RequestTimeout", func(c *Config) { c.RequestTimeout = -1 }},
	}
	for _, tc := range cases {
		c := base()
		tc.modify(&c)
		_, err := NewMember(c)
		if err == nil || !strings.Contains(err.Error(), "field "+tc.field) {
			t.Errorf("%s: want an error naming the field, got %v", tc.field, err)
		}
	}
	for _, p := range [][]string{{"sticky"}, {"consistent-hash", "range"}, {"cooperative-sticky"}, {"cooperative-sticky", "range"}} {
		c := base()
		c.Protocols = p
		if _, err := NewMember(c); err != nil {
			t.Errorf("protocols %v: %v", p, err)
		}
	}
}

func TestError_FromStatusAndCode(t *testing.T) {
	err := fromStatus(protoErr(codes.FailedPrecondition, "MEMBER_ID_REQUIRED", map[string]string{"member_id": "m-7"}))
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrMemberIDRequired) || e.Metadata["member_id"] != "m-7" || e.Code != errcode.MemberIDRequired || e.GRPCCode != codes.FailedPrecondition {
		t.Fatalf("ErrorInfo not parsed: %#v", err)
	}
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("status.Code through *Error: %v", status.Code(err))
	}
	if got := err.Error(); got != "cohort: MEMBER_ID_REQUIRED: scripted" {
		t.Fatalf("message %q", got)
	}
	if !errors.Is(fromStatus(errInvalidArg), ErrInvalidArgument) {
		t.Fatal("InvalidArgument without ErrorInfo must be ErrInvalidArgument")
	}
	if err := fromStatus(errNodeDown); Reason(err) != "" || status.Code(err) != codes.Unavailable {
		t.Fatalf("plain Unavailable changed: %v", err)
	}
	if !errors.Is(fromCode(cohortv1.ErrorCode_ERROR_CODE_UNKNOWN_TOPIC_OR_PARTITION, "x"), ErrUnknownTopicOrPartition) {
		t.Fatal("per-item code not mapped")
	}
	if fromCode(cohortv1.ErrorCode_ERROR_CODE_NONE, "") != nil {
		t.Fatal("NONE is not an error")
	}
}
