package assign

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzDecodeSubscription: any bytes give a subscription or an ErrMalformed,
// never a panic; whatever decodes as version 1 re-encodes to the same bytes.
// The kept corpus is in testdata/fuzz/FuzzDecodeSubscription.
func FuzzDecodeSubscription(f *testing.F) {
	for _, s := range []Subscription{
		{},
		{Topics: []string{"a", "b"}, Generation: NoGeneration},
		{Topics: []string{"orders"}, Owned: []TopicPartitions{{"orders", []int32{0, 5, 300}}}, Generation: 12, UserData: []byte("x")},
	} {
		data, err := EncodeSubscription(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := DecodeSubscription(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			return
		}
		again, err := EncodeSubscription(s)
		if err != nil {
			t.Fatalf("decoded subscription does not encode: %v", err)
		}
		if data[1] == 1 && data[0] == 0 && !bytes.Equal(again, data) {
			t.Fatalf("decode then encode changed the bytes:\n%x\n%x", data, again)
		}
		// Whatever decodes is a usable member.
		m := Member{ID: "m", Topics: s.Topics, Owned: s.Owned, Generation: s.Generation}
		topics := map[string]int32{}
		for _, tp := range s.Owned {
			topics[tp.Topic] = 4
		}
		if _, err := (CooperativeSticky{}).Assign([]Member{m}, topics); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzDecodeAssignment: as FuzzDecodeSubscription, for assignments.
func FuzzDecodeAssignment(f *testing.F) {
	for _, a := range []Assignment{
		{},
		{Topics: []TopicPartitions{{"a", []int32{0}}, {"b", []int32{1, 2}}}, UserData: []byte{1, 2}},
	} {
		data, err := EncodeAssignment(a)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := DecodeAssignment(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			return
		}
		again, err := EncodeAssignment(a)
		if err != nil {
			t.Fatalf("decoded assignment does not encode: %v", err)
		}
		if data[1] == 1 && data[0] == 0 && !bytes.Equal(again, data) {
			t.Fatalf("decode then encode changed the bytes:\n%x\n%x", data, again)
		}
	})
}
