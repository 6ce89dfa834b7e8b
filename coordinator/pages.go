package coordinator

import (
	"cmp"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/cohortlabs/cohort/errcode"
)

// Paged reads (OffsetFetch, DescribeGroups, ListGroups, ListTopics) answer
// in pages so that no state the budgets admit makes an answer larger than
// the gRPC send limit: a page holds at most Pages.MaxSize items and stops
// growing once it holds Pages.MaxBytes encoded bytes. Items come in a fixed
// order (offsets by topic and partition, groups by ID, topics by name), and
// a page token is the key of the last item returned, so a read resumes on
// any node, after any leader change, exactly after what it has seen; items
// added or removed meanwhile appear or not as they would in one read that
// saw the state at each page.

// Defaults for Pages.
const (
	// DefaultPageSize is the page size when a request names none: 1,000
	// offsets with the largest metadata (4 KiB) and topic names are about
	// 4.5 MB.
	DefaultPageSize = 1_000
	// DefaultMaxPageSize is the largest page size a request may ask for.
	DefaultMaxPageSize = 10_000
	// DefaultMaxPageBytes ends a page once its items hold this many bytes:
	// far below the 1 GiB send limit, and below gRPC's default 4 MiB
	// receive limit with the last item (a page always holds one item; the
	// largest item, one group's description, is bounded by the state-bytes
	// budget).
	DefaultMaxPageBytes = 3 << 20
)

// Pages bound one page of a paged read.
type Pages struct {
	// DefaultSize is the page size when the request's page_size is 0.
	DefaultSize int
	// MaxSize is the largest page size honoured; a larger page_size is
	// lowered to it.
	MaxSize int
	// MaxBytes ends a page once its items' encoded size reaches it. A page
	// holds at least one item, whatever its size.
	MaxBytes int
}

// DefaultPages are the page bounds cohortd starts with.
func DefaultPages() Pages {
	return Pages{DefaultSize: DefaultPageSize, MaxSize: DefaultMaxPageSize, MaxBytes: DefaultMaxPageBytes}
}

// Validate checks the bounds, naming the bad value.
func (p Pages) Validate() error {
	var errs []error
	if p.MaxSize < 1 {
		errs = append(errs, fmt.Errorf("coordinator: max page size %d must be positive", p.MaxSize))
	}
	if p.DefaultSize < 1 || p.DefaultSize > p.MaxSize {
		errs = append(errs, fmt.Errorf("coordinator: default page size %d must be between 1 and the max page size %d", p.DefaultSize, p.MaxSize))
	}
	if p.MaxBytes < 64<<10 {
		errs = append(errs, fmt.Errorf("coordinator: max page bytes %d must be at least 64 KiB (%d)", p.MaxBytes, 64<<10))
	}
	return errors.Join(errs...)
}

// page collects one page of items.
type page struct {
	size, maxBytes int
	n, bytes       int
}

// newPage starts a page for a request's page_size.
func (p Pages) newPage(pageSize int32) (*page, error) {
	switch {
	case pageSize < 0:
		return nil, invalid("page_size %d is negative (0 means the server's default, %d)", pageSize, p.DefaultSize)
	case pageSize == 0:
		return &page{size: p.DefaultSize, maxBytes: p.MaxBytes}, nil
	default:
		return &page{size: min(int(pageSize), p.MaxSize), maxBytes: p.MaxBytes}, nil
	}
}

// full reports whether the page takes no more items.
func (pg *page) full() bool { return pg.n >= pg.size || pg.bytes >= pg.maxBytes }

// add counts an item into the page.
func (pg *page) add(item proto.Message) {
	pg.n++
	pg.bytes += proto.Size(item)
}

// A token kind ties a token to the read that issued it.
type tokenKind byte

const (
	tokenOffsets  tokenKind = 'o'
	tokenDescribe tokenKind = 'd'
	tokenGroups   tokenKind = 'g'
	tokenTopics   tokenKind = 't'
)

// tokenVersion is the first byte of every token, so the encoding can
// change without an old token being misread.
const tokenVersion = 1

var tokenEncoding = base64.RawURLEncoding

func encodeToken(kind tokenKind, key []byte) string {
	return tokenEncoding.EncodeToString(append([]byte{tokenVersion, byte(kind)}, key...))
}

// decodeToken returns the key in token, which must be one kind issued.
// An empty token is the first page (nil key, ok false).
func decodeToken(kind tokenKind, token string) (key []byte, ok bool, err error) {
	if token == "" {
		return nil, false, nil
	}
	b, err := tokenEncoding.DecodeString(token)
	if err != nil || len(b) < 2 || b[0] != tokenVersion || tokenKind(b[1]) != kind {
		return nil, false, errcode.Errorf(errcode.InvalidArgument, "page_token %q is not a page token of this read: pass the next_page_token of its previous page", shorten(token))
	}
	return b[2:], true, nil
}

// shorten keeps an echoed value readable.
func shorten(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}

// offsetKey is the position of an offset in OffsetFetch's order.
type offsetKey struct {
	topic     string
	partition int32
}

func compareOffsetKeys(a, b offsetKey) int {
	if c := strings.Compare(a.topic, b.topic); c != 0 {
		return c
	}
	return cmp.Compare(a.partition, b.partition)
}

// encode is the topic's length, the topic, and the partition.
func (k offsetKey) encode() []byte {
	b := binary.AppendUvarint(nil, uint64(len(k.topic)))
	b = append(b, k.topic...)
	return binary.BigEndian.AppendUint32(b, uint32(k.partition))
}

func decodeOffsetKey(token string) (offsetKey, bool, error) {
	b, ok, err := decodeToken(tokenOffsets, token)
	if err != nil || !ok {
		return offsetKey{}, ok, err
	}
	n, w := binary.Uvarint(b)
	if w <= 0 || uint64(len(b)-w) != n+4 {
		return offsetKey{}, false, errcode.Errorf(errcode.InvalidArgument, "page_token %q is not a page token of this read: pass the next_page_token of its previous page", shorten(token))
	}
	topic := string(b[w : w+int(n)])
	return offsetKey{topic: topic, partition: int32(binary.BigEndian.Uint32(b[w+int(n):]))}, true, nil
}

// decodeNameToken returns the name (group ID, topic) a token of kind
// resumes after.
func decodeNameToken(kind tokenKind, token string) (string, bool, error) {
	b, ok, err := decodeToken(kind, token)
	return string(b), ok, err
}

func nameToken(kind tokenKind, name string) string {
	return encodeToken(kind, []byte(name))
}

// after returns the index of the first of sorted items whose key is
// greater than key.
func after[T, K any](sorted []T, key K, compare func(T, K) int) int {
	i, found := slices.BinarySearchFunc(sorted, key, compare)
	if found {
		i++
	}
	return i
}
