package serve

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/pelletier/go-toml/v2"
)

// Tokens are the clients of a server started with --tokens-file: each a
// name, the SHA-256 of its Bearer token (the file need not hold the
// secret), and its quotas. A request is the client whose token it
// carries; the name, never the token, is what logs, the audit log and
// session ownership say.
type Tokens struct {
	list []*Client
}

// Client is one entry of the tokens file.
type Client struct {
	// Name is the table's name ([tokens.NAME]).
	Name string
	hash [sha256.Size]byte
	// MaxConcurrent bounds the jails of this client's runs at once
	// (/v1/run, /run_code, /api/v2/execute); 0: only the server's
	// --max-concurrent.
	MaxConcurrent int
	// MaxSessions bounds the sessions this client holds; 0: only the
	// [sessions] caps.
	MaxSessions int

	// running counts this client's runs in flight: shared with the
	// client of the same name after a reload (carryOver).
	running *atomic.Int64
}

// carryOver gives every client of t that old also names old's count of
// runs in flight, so that a reload does not reset a quota.
func (t *Tokens) carryOver(old *Tokens) {
	running := make(map[string]*atomic.Int64, len(old.list))
	for _, o := range old.list {
		running[o.Name] = o.running
	}
	for _, c := range t.list {
		if r, ok := running[c.Name]; ok {
			c.running = r
		}
	}
}

// tokenFile is the tokens file's shape (docs/api.md, "Tokens").
type tokenFile struct {
	Tokens map[string]struct {
		Token         string `toml:"token"`
		TokenSHA256   string `toml:"token_sha256"`
		MaxConcurrent int    `toml:"max_concurrent"`
		MaxSessions   int    `toml:"max_sessions"`
	} `toml:"tokens"`
}

// clientName is what a client of the tokens file may be called. It is
// compiled at first use: its {0,63} is 63 copies of the class, 0.14 ms
// and some 860 allocations that every run of the binary paid at package
// init (GODEBUG=inittrace=1), a CLI run's too.
var clientName = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
})

// ParseTokens reads a tokens file's TOML strictly: [tokens.NAME] tables,
// each with token (one word of at least 16 characters) or token_sha256
// (its SHA-256 in hex), and optional max_concurrent and max_sessions.
func ParseTokens(data []byte) (*Tokens, error) {
	var f tokenFile
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		var sm *toml.StrictMissingError
		if errors.As(err, &sm) {
			return nil, fmt.Errorf("unknown key: %s", strings.TrimSpace(sm.String()))
		}
		return nil, err
	}
	if len(f.Tokens) == 0 {
		return nil, errors.New("no [tokens.NAME] table: the file names no client")
	}
	names := make([]string, 0, len(f.Tokens))
	for n := range f.Tokens {
		names = append(names, n)
	}
	sort.Strings(names)
	t := &Tokens{}
	seen := map[[sha256.Size]byte]string{}
	for _, n := range names {
		e := f.Tokens[n]
		if !clientName().MatchString(n) {
			return nil, fmt.Errorf("[tokens.%s]: a name is 1 to 64 of A-Z a-z 0-9 _ . -, starting with a letter or digit", n)
		}
		c := &Client{Name: n, MaxConcurrent: e.MaxConcurrent, MaxSessions: e.MaxSessions, running: new(atomic.Int64)}
		switch {
		case e.Token != "" && e.TokenSHA256 != "":
			return nil, fmt.Errorf("[tokens.%s]: token and token_sha256 both given: give one", n)
		case e.Token != "":
			if len(e.Token) < 16 || strings.ContainsAny(e.Token, " \t\r\n") {
				return nil, fmt.Errorf("[tokens.%s] token: a token is one word of at least 16 characters", n)
			}
			c.hash = sha256.Sum256([]byte(e.Token))
		case e.TokenSHA256 != "":
			b, err := hex.DecodeString(e.TokenSHA256)
			if err != nil || len(b) != sha256.Size {
				return nil, fmt.Errorf("[tokens.%s] token_sha256: want 64 hex digits (sha256sum of the token)", n)
			}
			copy(c.hash[:], b)
		default:
			return nil, fmt.Errorf("[tokens.%s]: no token or token_sha256", n)
		}
		if e.MaxConcurrent < 0 || e.MaxSessions < 0 {
			return nil, fmt.Errorf("[tokens.%s]: max_concurrent and max_sessions must not be negative", n)
		}
		if other, dup := seen[c.hash]; dup {
			return nil, fmt.Errorf("[tokens.%s] has the same token as [tokens.%s]: each client needs its own", n, other)
		}
		seen[c.hash] = n
		t.list = append(t.list, c)
	}
	return t, nil
}

// match is the client whose token r carries, or nil. Every entry is
// compared, in constant time each, so that the time taken says nothing
// of which entry (if any) matched.
func (t *Tokens) match(r *http.Request) *Client {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return nil
	}
	h := sha256.Sum256([]byte(got))
	var found *Client
	for _, c := range t.list {
		if subtle.ConstantTimeCompare(h[:], c.hash[:]) == 1 {
			found = c
		}
	}
	return found
}

// clientKey is the context key of the request's *Client.
type clientKey struct{}

// requestClient is the tokens file's client r authenticated as, or nil.
func requestClient(r *http.Request) *Client {
	c, _ := r.Context().Value(clientKey{}).(*Client)
	return c
}

func withClient(r *http.Request, c *Client) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), clientKey{}, c))
}

// startRun counts one run of c against its max_concurrent, or says why
// it may not start; done gives it back.
func (c *Client) startRun() (done func(), err error) {
	if c == nil || c.MaxConcurrent == 0 {
		return func() {}, nil
	}
	if c.running.Add(1) > int64(c.MaxConcurrent) {
		c.running.Add(-1)
		return nil, fmt.Errorf("client %s runs at most %d jails at once (max_concurrent in the tokens file): retry when one has ended", c.Name, c.MaxConcurrent)
	}
	return func() { c.running.Add(-1) }, nil
}

// revoked are the owners (clientOf's "client:NAME") of old that next no
// longer names with the same token: a client a reload took away, or one
// whose token it changed. Their open sockets must not outlive the token.
func (t *Tokens) revoked(next *Tokens) map[string]bool {
	out := map[string]bool{}
	for _, o := range t.list {
		kept := false
		for _, c := range next.list {
			if c.Name == o.Name && c.hash == o.hash {
				kept = true
			}
		}
		if !kept {
			out["client:"+o.Name] = true
		}
	}
	return out
}

// holds says whether c is still a client of t with the same token.
func (t *Tokens) holds(c *Client) bool {
	for _, n := range t.list {
		if n.Name == c.Name && n.hash == c.hash {
			return true
		}
	}
	return false
}
