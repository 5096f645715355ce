package bridge

import "strings"

// MinSecretFragment is the shortest run of a secret's characters that a
// Redactor takes out of a text: any MinSecretFragment or more consecutive
// characters of the secret, wherever they stand, not only the whole
// secret. An upstream that echoes a key and a text cut at a length of
// the cell's choosing (the model name it sent is echoed first) would
// otherwise hand the cell the key's first part.
const MinSecretFragment = 8

// redactedMark replaces each run of a secret's characters.
const redactedMark = "[redacted]"

// Redactor takes a secret, and every fragment of it of MinSecretFragment
// or more bytes, out of texts bound for the jail, the audit log or the
// report. Redact before any cut: a cut made first can split the secret so
// that neither half is the whole.
//
// The check is a set of the secret's MinSecretFragment-byte windows
// (every substring of it that long); a text position whose window is in
// the set starts a marked stretch, and overlapping stretches merge, so a
// run of k >= MinSecretFragment characters of the secret is covered
// whole. One pass, with a bitmap in front of the map, costs a text of
// 16 MiB some tens of milliseconds.
type Redactor struct {
	short   []string // secrets shorter than MinSecretFragment: replaced whole
	windows map[uint64]struct{}
	bloom   [1 << 10]uint64 // 2^16 bits of the windows' hashes
}

// NewRedactor returns a Redactor for secrets (the key, and a credential
// the endpoint's URL carries); empty ones are ignored.
func NewRedactor(secrets ...string) *Redactor {
	r := &Redactor{windows: map[uint64]struct{}{}}
	for _, secret := range secrets {
		if secret == "" {
			continue
		}
		if len(secret) < MinSecretFragment {
			r.short = append(r.short, secret)
			continue
		}
		for i := 0; i+MinSecretFragment <= len(secret); i++ {
			w := window(secret, i)
			r.windows[w] = struct{}{}
			h := bloomBit(w)
			r.bloom[h>>6] |= 1 << (h & 63)
		}
	}
	return r
}

func window(s string, i int) uint64 {
	var w uint64
	for j := 0; j < MinSecretFragment; j++ {
		w = w<<8 | uint64(s[i+j])
	}
	return w
}

func bloomBit(w uint64) uint64 {
	return (w * 0x9E3779B97F4A7C15) >> 48
}

// Redact returns text with every run of MinSecretFragment or more bytes of
// a secret replaced by one mark. A secret shorter than that is replaced
// where it stands whole.
func (r *Redactor) Redact(text string) string {
	if r == nil {
		return text
	}
	for _, s := range r.short {
		text = strings.ReplaceAll(text, s, redactedMark)
	}
	if len(r.windows) == 0 || len(text) < MinSecretFragment {
		return text
	}
	var b strings.Builder
	copied := 0 // text[:copied] is in b (or redacted)
	end := -1   // the marked stretch runs to text[:end]
	var w uint64
	for i := 0; i < len(text); i++ {
		w = w<<8 | uint64(text[i])
		start := i - MinSecretFragment + 1
		if start < 0 {
			continue
		}
		h := bloomBit(w)
		if r.bloom[h>>6]&(1<<(h&63)) == 0 {
			continue
		}
		if _, ok := r.windows[w]; !ok {
			continue
		}
		if start > end {
			// A new stretch: what lies before it is kept.
			if b.Len() == 0 {
				b.Grow(len(text))
			}
			b.WriteString(text[copied:start])
			b.WriteString(redactedMark)
		}
		end = i + 1
		copied = end
	}
	if end < 0 {
		return text
	}
	b.WriteString(text[copied:])
	return b.String()
}
