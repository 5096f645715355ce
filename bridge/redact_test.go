package bridge

import (
	"strings"
	"testing"
)

func TestRedactor(t *testing.T) {
	const key = "sk-0123456789abcdefghij"
	tests := []struct {
		name, text, want string
		secrets          []string
	}{
		{"the whole key", "key " + key + " end", "key [redacted] end", nil},
		{"its first part, cut", "model mmmm key " + key[:12], "model mmmm key [redacted]", nil},
		{"its last part", key[9:] + "!", "[redacted]!", nil},
		{"8 characters of it", "x" + key[5:13] + "x", "x[redacted]x", nil},
		{"7 characters are kept", "x" + key[5:12] + "x", "x" + key[5:12] + "x", nil},
		{"two pieces apart", key[:8] + " and " + key[10:20], "[redacted] and [redacted]", nil},
		{"repeated", key + key, "[redacted]", nil},
		{"nothing of it", "hello world, nothing here", "hello world, nothing here", nil},
		{"empty text", "", "", nil},
		{"a short secret whole", "a pw12 b", "a [redacted] b", []string{"pw12"}},
		{"a second secret", "token=qwertyuiopasdf", "token=[redacted]", []string{"qwertyuiopasdf"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRedactor(append([]string{key}, tc.secrets...)...)
			if got := r.Redact(tc.text); got != tc.want {
				t.Errorf("Redact(%q) = %q, want %q", tc.text, got, tc.want)
			}
		})
	}
	if got := NewRedactor("").Redact("abc"); got != "abc" {
		t.Errorf("an empty secret redacted %q", got)
	}
}

// TestRedactBeforeCut: whatever length the text before the key has, the
// error bound for the jail holds no 8 characters of the key.
func TestRedactBeforeCut(t *testing.T) {
	key := "sk-" + strings.Repeat("Zq9", 40)
	r := NewRedactor(key)
	for n := 0; n < 320; n++ {
		text := cutRunes(r.Redact(cleanLine(strings.Repeat("m", n)+"\n"+key)), 300)
		for i := 0; i+8 <= len(key); i++ {
			if strings.Contains(text, key[i:i+8]) {
				t.Fatalf("prefix of %d: %q holds %q", n, text, key[i:i+8])
			}
		}
	}
}

func BenchmarkRedact16MiB(b *testing.B) {
	r := NewRedactor("sk-proj-" + strings.Repeat("a1B2c3", 20))
	text := strings.Repeat("the model said something long and harmless. ", 16<<20/44)
	b.SetBytes(int64(len(text)))
	for i := 0; i < b.N; i++ {
		_ = r.Redact(text)
	}
}
