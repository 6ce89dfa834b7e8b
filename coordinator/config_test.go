package coordinator

import (
	"strings"
	"testing"
)

func TestDefaultConfig_IsValidAndZeroDelayIsLegal(t *testing.T) {
	t.Parallel()
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatalf("DefaultConfig: %v", err)
	}
	c.InitialRebalanceDelay = 0
	if err := c.Validate(); err != nil {
		t.Fatalf("no initial delay: %v", err)
	}
}

// Validate fills nothing in: a field left at zero is refused, naming it.
func TestConfigValidate_RefusesUnsetFields(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"zero config", func(c *Config) { *c = Config{} }, "session timeout"},
		{"negative delay", func(c *Config) { c.InitialRebalanceDelay = -1 }, "initial rebalance delay"},
		{"no tick", func(c *Config) { c.Tick = 0 }, "tick"},
		{"no barrier timeout", func(c *Config) { c.BarrierTimeout = 0 }, "barrier timeout"},
		{"no retention", func(c *Config) { c.OffsetsRetention = 0 }, "offsets retention"},
		{"no logger", func(c *Config) { c.Logger = nil }, "Logger"},
		{"no clock", func(c *Config) { c.Now = nil }, "Now"},
		{"zero limits", func(c *Config) { c.Limits = Limits{} }, "MaxGroupIDBytes"},
		{"one zero limit", func(c *Config) { c.Limits.MaxOffsetMetadataBytes = 0 }, "MaxOffsetMetadataBytes"},
		{"no pages", func(c *Config) { c.Pages = Pages{} }, "max page size 0"},
		{"default page over the max", func(c *Config) { c.Pages.DefaultSize = c.Pages.MaxSize + 1 }, "default page size 10001"},
		{"tiny page bytes", func(c *Config) { c.Pages.MaxBytes = 100 }, "max page bytes 100"},
	} {
		c := DefaultConfig()
		tc.change(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate() = %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
}
