package serve

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestParseTokens(t *testing.T) {
	sum := sha256.Sum256([]byte("the-second-token-1234"))
	tests := []struct {
		name, file, err string
	}{
		{"token and hash", "[tokens.a]\ntoken = \"the-first-token-12345\"\nmax_concurrent = 1\n[tokens.b]\ntoken_sha256 = \"" + hex.EncodeToString(sum[:]) + "\"\nmax_sessions = 2\n", ""},
		{"empty", "", "no [tokens.NAME]"},
		{"unknown key", "[tokens.a]\ntoken = \"the-first-token-12345\"\nmax_concurent = 1\n", "unknown key"},
		{"short token", "[tokens.a]\ntoken = \"short\"\n", "at least 16"},
		{"token with a space", "[tokens.a]\ntoken = \"the first token 12345\"\n", "one word"},
		{"both", "[tokens.a]\ntoken = \"the-first-token-12345\"\ntoken_sha256 = \"" + hex.EncodeToString(sum[:]) + "\"\n", "both given"},
		{"neither", "[tokens.a]\nmax_concurrent = 1\n", "no token"},
		{"bad hash", "[tokens.a]\ntoken_sha256 = \"abc\"\n", "64 hex digits"},
		{"negative", "[tokens.a]\ntoken = \"the-first-token-12345\"\nmax_concurrent = -1\n", "negative"},
		{"bad name", "[tokens.\"a b\"]\ntoken = \"the-first-token-12345\"\n", "a name is"},
		{"same token twice", "[tokens.a]\ntoken = \"the-second-token-1234\"\n[tokens.b]\ntoken_sha256 = \"" + hex.EncodeToString(sum[:]) + "\"\n", "same token"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTokens([]byte(tc.file))
			if (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("ParseTokens: %v, want %q", err, tc.err)
			}
		})
	}
}

func TestTokensMatchAndQuota(t *testing.T) {
	sum := sha256.Sum256([]byte("the-second-token-1234"))
	tk, err := ParseTokens([]byte("[tokens.a]\ntoken = \"the-first-token-12345\"\nmax_concurrent = 1\n[tokens.b]\ntoken_sha256 = \"" + hex.EncodeToString(sum[:]) + "\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ header, want string }{
		{"Bearer the-first-token-12345", "a"}, {"Bearer the-second-token-1234", "b"},
		{"Bearer the-first-token-1234", ""}, {"the-first-token-12345", ""}, {"", ""},
	} {
		r := httptest.NewRequest("GET", "/v1/run", nil)
		r.Header.Set("Authorization", c.header)
		got := ""
		if cl := tk.match(r); cl != nil {
			got = cl.Name
		}
		if got != c.want {
			t.Errorf("match(%q) = %q, want %q", c.header, got, c.want)
		}
	}
	a := tk.list[0]
	done, err := a.startRun()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.startRun(); err == nil || !strings.Contains(err.Error(), "max_concurrent") {
		t.Errorf("a second run of a client with max_concurrent 1: %v", err)
	}
	done()
	if done2, err := a.startRun(); err != nil {
		t.Errorf("after the first ended: %v", err)
	} else {
		done2()
	}
	b := tk.list[1]
	for i := 0; i < 5; i++ { // no quota: never refused, never counted
		if _, err := b.startRun(); err != nil {
			t.Fatal(err)
		}
	}
	var none *Client
	if _, err := none.startRun(); err != nil {
		t.Errorf("a request without a tokens file: %v", err)
	}
}

// TestReload: a reload swaps the policy for the requests after it, keeps
// a client's runs in flight counted under its name, and refuses what
// only a restart can change.
func TestReload(t *testing.T) {
	tk := func(s string) *Tokens {
		t.Helper()
		v, err := ParseTokens([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	old := tk("[tokens.a]\ntoken = \"the-first-token-12345\"\nmax_concurrent = 1\n")
	s := New(Options{Config: Config{MaxMemory: 1 << 30}, Tokens: old, Runtimes: map[string]*Runtime{"python": {}}})
	done, err := old.list[0].startRun()
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	next := tk("[tokens.a]\ntoken = \"the-first-token-12345\"\nmax_concurrent = 1\n[tokens.b]\ntoken = \"the-other-token-12345\"\n")
	if err := s.Reload(Config{MaxMemory: 256 << 20}, next); err != nil {
		t.Fatal(err)
	}
	if got := s.conf().MaxMemory; got != 256<<20 {
		t.Errorf("after the reload max memory %d, want %d", got, 256<<20)
	}
	if _, err := next.list[0].startRun(); err == nil {
		t.Error("a's run in flight before the reload was not counted after it")
	}
	for _, c := range []struct {
		name   string
		cfg    Config
		tokens *Tokens
		want   string
	}{
		{"a new rootfs", Config{Rootfs: []string{"other"}}, next, "restart"},
		{"tokens taken away", Config{}, nil, "not added or taken away"},
	} {
		if err := s.Reload(c.cfg, c.tokens); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	if got := s.conf().MaxMemory; got != 256<<20 {
		t.Errorf("a refused reload changed the policy: max memory %d", got)
	}
}

// TestTokensRevoked: a reload revokes a client it takes away and one
// whose token it changes, not one it keeps as it was.
func TestTokensRevoked(t *testing.T) {
	parse := func(s string) *Tokens {
		t.Helper()
		tk, err := ParseTokens([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}
	old := parse("[tokens.kept]\ntoken = \"the-kept-token-123456\"\n[tokens.gone]\ntoken = \"the-gone-token-123456\"\n[tokens.rotated]\ntoken = \"the-old-token-1234567\"\n")
	next := parse("[tokens.kept]\ntoken = \"the-kept-token-123456\"\n[tokens.rotated]\ntoken = \"the-new-token-1234567\"\n[tokens.added]\ntoken = \"the-added-token-12345\"\n")
	got := old.revoked(next)
	if len(got) != 2 || !got["client:gone"] || !got["client:rotated"] {
		t.Errorf("revoked = %v, want client:gone and client:rotated", got)
	}
	for _, c := range old.list {
		if want := c.Name == "kept"; next.holds(c) != want {
			t.Errorf("holds(%s) = %v, want %v", c.Name, !want, want)
		}
	}
}
