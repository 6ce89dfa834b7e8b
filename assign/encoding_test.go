package assign

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestEncodeSubscription_Golden(t *testing.T) {
	t.Parallel()
	got, err := EncodeSubscription(Subscription{
		Topics:     []string{"b", "a", "b"},
		Owned:      []TopicPartitions{{Topic: "b", Partitions: []int32{3, 1}}, {Topic: "a", Partitions: []int32{0}}, {Topic: "b", Partitions: []int32{1}}},
		Generation: 7,
		UserData:   []byte{0xff},
	})
	if err != nil {
		t.Fatal(err)
	}
	// version 1 | 2 topics "a" "b" | 2 owned: "a" [0], "b" [1 3] | gen zig-zag 14 | 1 byte ff
	want := "0001" + "02" + "0161" + "0162" + "02" + "0161" + "01" + "00" + "0162" + "02" + "01" + "03" + "0e" + "01" + "ff"
	if hex.EncodeToString(got) != want {
		t.Fatalf("encoding\n got %x\nwant %s", got, want)
	}
	s, err := DecodeSubscription(got)
	if err != nil {
		t.Fatal(err)
	}
	wantS := Subscription{Topics: []string{"a", "b"}, Owned: []TopicPartitions{{"a", []int32{0}}, {"b", []int32{1, 3}}}, Generation: 7, UserData: []byte{0xff}}
	if !reflect.DeepEqual(s, wantS) {
		t.Fatalf("decoded %+v, want %+v", s, wantS)
	}
}

func TestEncodeAssignment_Golden(t *testing.T) {
	t.Parallel()
	got, err := EncodeAssignment(Assignment{Topics: []TopicPartitions{{"t", []int32{2, 0, 300}}}})
	if err != nil {
		t.Fatal(err)
	}
	want := "0001" + "01" + "0174" + "03" + "00" + "02" + "ac02" + "00"
	if hex.EncodeToString(got) != want {
		t.Fatalf("encoding\n got %x\nwant %s", got, want)
	}
}

func TestEncode_RefusesInvalid(t *testing.T) {
	t.Parallel()
	for name, s := range map[string]Subscription{
		"empty topic":        {Topics: []string{""}},
		"long topic":         {Topics: []string{strings.Repeat("x", MaxNameLength+1)}},
		"negative partition": {Owned: []TopicPartitions{{"t", []int32{-1}}}},
		"empty owned topic":  {Owned: []TopicPartitions{{"", []int32{1}}}},
	} {
		if _, err := EncodeSubscription(s); err == nil {
			t.Errorf("%s: encoded", name)
		}
	}
}

func TestDecode_RejectsMalformed(t *testing.T) {
	t.Parallel()
	valid, _ := EncodeSubscription(Subscription{Topics: []string{"a"}, Owned: []TopicPartitions{{"a", []int32{1}}}, Generation: 1})
	cases := []struct {
		name, hex, want string
	}{
		{"empty", "", "version at byte 0: need 2 bytes, have 0"},
		{"version 0", "0000", "version 0 does not exist"},
		{"truncated topic count", "0001", "topic count at byte 2: truncated varint"},
		{"huge topic count", "0001ffffffff0f", "elements cannot fit"},
		{"empty topic", "0001010000", "topic 0 at byte 3: empty topic name"},
		{"topic past end", "00010105ab", "name of 5 bytes but only 1 left"},
		{"unsorted topics", "000102016201610000", `topic 1 at byte 5: "a" does not sort after "b"`},
		{"duplicate topics", "000102016101610000", `"a" does not sort after "a"`},
		{"non-minimal varint", "00018100", "not minimal"},
		{"empty partition list", "0001000101610000", `owned topic "a" partition count at byte 6: empty partition list`},
		{"unsorted partitions", "000100010161020201", `owned topic "a" partition 1 at byte 8: 1 does not sort after 2`},
		{"partition over int32", "00010001016101808080800800", "is over 2147483647"},
		{"generation over int32", "00010000808080801000", "generation at byte 4: 2147483648 is outside int32"},
		{"user data past end", "0001000000" + "05ab", "user data at byte 5: 5 bytes but only 1 left"},
		{"trailing bytes", hex.EncodeToString(valid) + "00", "1 bytes after the last field"},
	}
	for _, c := range cases {
		data, err := hex.DecodeString(c.hex)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		_, err = DecodeSubscription(data)
		if err == nil || !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want ErrMalformed containing %q", c.name, err, c.want)
		}
	}
	if _, err := DecodeAssignment([]byte{0, 1, 0}); err == nil || !strings.Contains(err.Error(), "assignment: user data") {
		t.Errorf("truncated assignment: %v", err)
	}
}

// A newer client's metadata: version 2 with a field appended. An old
// coordinator reads the version-1 fields and skips the rest.
func TestDecodeSubscription_NewerVersionSkipsUnknownFields(t *testing.T) {
	t.Parallel()
	data, _ := EncodeSubscription(Subscription{Topics: []string{"a"}, Generation: 3})
	data[1] = 2
	data = append(data, 0xde, 0xad)
	s, err := DecodeSubscription(data)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s.Topics, []string{"a"}) || s.Generation != 3 {
		t.Fatalf("decoded %+v", s)
	}
}

func TestProperty_Encoding_RoundTrips(t *testing.T) {
	t.Parallel()
	name := rapid.StringMatching(`[a-z0-9._-]{1,12}`)
	tps := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) TopicPartitions {
		return TopicPartitions{Topic: name.Draw(t, "topic"), Partitions: rapid.SliceOfN(rapid.Int32Range(0, 1<<31-1), 1, 8).Draw(t, "partitions")}
	}), 0, 6)
	rapid.Check(t, func(t *rapid.T) {
		s := Subscription{
			Topics:     rapid.SliceOfN(name, 0, 6).Draw(t, "topics"),
			Owned:      tps.Draw(t, "owned"),
			Generation: rapid.Int32().Draw(t, "generation"),
			UserData:   rapid.SliceOfN(rapid.Byte(), 0, 8).Draw(t, "user data"),
		}
		data, err := EncodeSubscription(s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeSubscription(data)
		if err != nil {
			t.Fatal(err)
		}
		again, _ := EncodeSubscription(got)
		if !bytes.Equal(data, again) {
			t.Fatalf("re-encoding differs")
		}
		// Decoded is the canonical form of the input.
		if !reflect.DeepEqual(got.Owned, canonicalOrNil(s.Owned)) || got.Generation != s.Generation || !bytes.Equal(got.UserData, s.UserData) {
			t.Fatalf("decoded %+v from %+v", got, s)
		}
		a := Assignment{Topics: tps.Draw(t, "assignment"), UserData: s.UserData}
		data, err = EncodeAssignment(a)
		if err != nil {
			t.Fatal(err)
		}
		ga, err := DecodeAssignment(data)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(ga.Topics, canonicalOrNil(a.Topics)) {
			t.Fatalf("decoded %+v from %+v", ga, a)
		}
	})
}

func canonicalOrNil(tps []TopicPartitions) []TopicPartitions {
	c := canonicalTopicPartitions(tps)
	if len(c) == 0 {
		return nil
	}
	return c
}

func TestDecodeMember_NamesTheMember(t *testing.T) {
	t.Parallel()
	_, err := DecodeMember("m-1", "", []byte{0})
	if err == nil || !strings.Contains(err.Error(), `member "m-1"`) || !errors.Is(err, ErrMalformed) {
		t.Fatalf("error %v", err)
	}
}
