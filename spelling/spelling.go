// Package spelling finds the name a mistyped one was meant to be, for the
// "did you mean" of a command line's error: --timout is --timeout,
// `rljail sesion` is `rljail session`.
//
// It suggests only what is close: a unique completion of what was typed
// (three characters at least), or a name within one edit (typed four or
// five characters long) or two (six and more), an edit being a character
// added, dropped, changed, or two neighbours swapped. A short word is
// never "corrected" into another one (rm is not run, true is not run).
package spelling

import "strings"

// Closest returns the name among names that typed was most likely meant
// to be, or "" when none is close enough. Names of one character (short
// flag aliases) are never suggested; the first of equally close names
// wins.
func Closest(typed string, names []string) string {
	if len(typed) < 2 {
		return ""
	}
	var prefixed []string
	for _, n := range names {
		if len(n) > 1 && len(typed) >= 3 && strings.HasPrefix(n, typed) && n != typed {
			prefixed = append(prefixed, n)
		}
	}
	if len(prefixed) == 1 {
		return prefixed[0]
	}
	limit := 0
	switch {
	case len(typed) >= 6:
		limit = 2
	case len(typed) >= 4:
		limit = 1
	}
	best, bestD := "", limit+1
	for _, n := range names {
		if len(n) < 2 || n == typed {
			continue
		}
		if d := distance(typed, n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// distance is the optimal string alignment distance of a and b (bytes):
// insertions, deletions, substitutions and swaps of neighbours.
func distance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
