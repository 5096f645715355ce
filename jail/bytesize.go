package jail

import "strconv"

// FormatBytes writes a size as the flags take it (512m, 1g, 64k; binary
// multiples), so that a message names a limit as the caller wrote it
// rather than as a count of bytes: 104857600 is "100m". A size that is
// no whole multiple of a unit gets one decimal and its exact count
// ("97.7k (100000 bytes)"); below 1k it is "N bytes".
func FormatBytes(n int64) string {
	if n == 1 {
		return "1 byte"
	}
	if n < 1<<10 && n > -(1<<10) {
		return strconv.FormatInt(n, 10) + " bytes"
	}
	units := []struct {
		suffix string
		size   int64
	}{{"t", 1 << 40}, {"g", 1 << 30}, {"m", 1 << 20}, {"k", 1 << 10}}
	abs := n
	if abs < 0 {
		abs = -abs
	}
	for _, u := range units {
		if abs%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.suffix
		}
	}
	for _, u := range units {
		if abs >= u.size {
			return strconv.FormatFloat(float64(n)/float64(u.size), 'f', 1, 64) + u.suffix + " (" + strconv.FormatInt(n, 10) + " bytes)"
		}
	}
	return strconv.FormatInt(n, 10) + " bytes"
}
