package jail

import (
	"errors"
	"math"
	"strconv"
	"strings"
)

// Why a size does not parse (ParseSize); the CLI and the service each say
// it with the name of their field.
var (
	ErrNotSize     = errors.New("is not a size (such as 512m, 1g, 65536)")
	ErrNotPositive = errors.New("must be positive")
	ErrTooLarge    = errors.New("is too large")
	ErrBelowByte   = errors.New("is less than one byte")
)

// ParseSize parses a byte size in docker's spelling, as the limits take
// it: a number with an optional unit b, k, m, g or t (binary multiples,
// case-insensitive, an optional trailing "b" or "ib": 512m, 1g, 64MiB,
// 0.5g). The result is at least one byte: a size that rounds to zero
// would silently mean "the default". An error is one of ErrNotSize,
// ErrNotPositive, ErrTooLarge and ErrBelowByte.
func ParseSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "ib"), "b")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k':
			mult = 1 << 10
		case 'm':
			mult = 1 << 20
		case 'g':
			mult = 1 << 30
		case 't':
			mult = 1 << 40
		}
		if mult != 1 {
			t = t[:n-1]
		}
	}
	if t == "" || strings.ContainsAny(t, "xXpP_") {
		return 0, ErrNotSize // no hex floats, no digit separators
	}
	// Plain integers exactly; fractions (0.5g) through float64.
	if n, err := strconv.ParseInt(t, 10, 64); err == nil {
		if n <= 0 {
			return 0, ErrNotPositive
		}
		if n > math.MaxInt64/mult {
			return 0, ErrTooLarge
		}
		return n * mult, nil
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, ErrNotSize
	}
	if v <= 0 {
		return 0, ErrNotPositive
	}
	bytes := v * float64(mult)
	if bytes >= math.MaxInt64 {
		return 0, ErrTooLarge
	}
	if bytes < 1 {
		return 0, ErrBelowByte
	}
	return int64(bytes), nil
}
