package auth

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
)

// MinTokenBytes is the shortest token a token file may hold: a bearer
// token is a password that never expires, so guessable ones are refused.
const MinTokenBytes = 16

// Tokens are the bearer tokens a node accepts, each naming a principal,
// read from a file (reloaded by Reload when it changes) plus any given at
// start. The file has one token per line, "token,role,name"; blank lines
// and lines starting with # are ignored:
//
//	# who may do what
//	3f6c0d...e1,admin,alice
//	9b1a77...04,client,billing
//	c0ffee...42,node,n1
type Tokens struct {
	path        string
	static      map[[sha256.Size]byte]Principal
	staticPlain map[Principal]string

	mu     sync.RWMutex
	byHash map[[sha256.Size]byte]Principal
	plain  map[Principal]string // a principal's first token, for a node's own calls
	stamps []stamp
}

// NewTokens reads path (none when empty) and adds static (token →
// principal). Tokens are compared by their SHA-256, so a lookup takes the
// same time whichever byte of a wrong token differs.
func NewTokens(path string, static map[string]Principal) (*Tokens, error) {
	t := &Tokens{path: path, static: map[[sha256.Size]byte]Principal{}, staticPlain: map[Principal]string{}}
	for tok, p := range static {
		if err := checkToken(tok, p); err != nil {
			return nil, err
		}
		t.static[sha256.Sum256([]byte(tok))] = p
		t.staticPlain[p] = tok
	}
	if _, err := t.Reload(); err != nil {
		return nil, err
	}
	return t, nil
}

func checkToken(tok string, p Principal) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if len(tok) < MinTokenBytes {
		return fmt.Errorf("token for %s: %d bytes, at least %d", p, len(tok), MinTokenBytes)
	}
	return nil
}

// Name says what is reloaded, for logs.
func (t *Tokens) Name() string { return "token file " + t.path }

// Empty reports whether no token is known.
func (t *Tokens) Empty() bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.byHash) == 0
}

// Lookup returns the principal token names.
func (t *Tokens) Lookup(token string) (Principal, bool) {
	h := sha256.Sum256([]byte(token))
	t.mu.RLock()
	defer t.mu.RUnlock()
	p, ok := t.byHash[h]
	return p, ok
}

// TokenFor is a token naming p ("" when none does): what a node sends on
// its own calls to other nodes when it has no certificate.
func (t *Tokens) TokenFor(p Principal) string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.plain[p]
}

// Reload reads the file again when it changed. A file with a bad line is
// refused whole, naming the line, and the tokens in force stay.
func (t *Tokens) Reload() (bool, error) {
	byHash := map[[sha256.Size]byte]Principal{}
	plain := map[Principal]string{}
	var stamps []stamp
	if t.path != "" {
		var err error
		if stamps, err = statFiles(t.path); err != nil {
			return false, fmt.Errorf("token file: %w", err)
		}
		t.mu.RLock()
		same := t.byHash != nil && sameStamps(stamps, t.stamps)
		t.mu.RUnlock()
		if same {
			return false, nil
		}
		data, err := os.ReadFile(t.path)
		if err != nil {
			return false, fmt.Errorf("token file: %w", err)
		}
		if err := parseTokens(data, byHash, plain); err != nil {
			return false, fmt.Errorf("token file %s: %w", t.path, err)
		}
	}
	for h, p := range t.static {
		byHash[h] = p
	}
	for p, tok := range t.staticPlain {
		if _, ok := plain[p]; !ok {
			plain[p] = tok
		}
	}
	t.mu.Lock()
	t.byHash, t.plain, t.stamps = byHash, plain, stamps
	t.mu.Unlock()
	return true, nil
}

func parseTokens(data []byte, byHash map[[sha256.Size]byte]Principal, plain map[Principal]string) error {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Split(line, ",")
		if len(fields) != 3 {
			return fmt.Errorf("line %d: want token,role,name", n)
		}
		tok := strings.TrimSpace(fields[0])
		p := Principal{Role: Role(strings.TrimSpace(fields[1])), Name: strings.TrimSpace(fields[2])}
		if err := checkToken(tok, p); err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
		h := sha256.Sum256([]byte(tok))
		if q, dup := byHash[h]; dup && q != p {
			return fmt.Errorf("line %d: the same token names %s and %s", n, q, p)
		}
		byHash[h] = p
		if _, ok := plain[p]; !ok {
			plain[p] = tok
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return nil
}

// ErrNoToken is returned by ParseBearer for a header that is not a bearer
// token.
var ErrNoToken = errors.New(`want "Bearer <token>"`)

// ParseBearer reads an authorization header's bearer token.
func ParseBearer(header string) (string, error) {
	tok, ok := strings.CutPrefix(header, "Bearer ")
	if !ok || tok == "" {
		return "", ErrNoToken
	}
	return tok, nil
}
