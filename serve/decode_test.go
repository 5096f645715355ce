package serve

import (
	"strings"
	"testing"
)

func TestJSONValuesOver(t *testing.T) {
	cases := []struct {
		body string
		max  int
		over bool
	}{
		{`{"command":["a","b","c"]}`, 4, false}, // { [ , ,
		{`{"command":["a","b","c"]}`, 3, true},
		{`{"code":"a,b,c,[{{{,,,"}`, 1, false}, // inside a string
		{`{"code":"a\",[,[,["}`, 1, false},     // an escaped quote stays in the string
		{`{"code":"a\\",[1,2]}`, 2, true},      // an escaped backslash ends it
		{`{"command":["true"` + strings.Repeat(`,""`, 1000) + `]}`, 1000, true},
	}
	for _, c := range cases {
		if got := jsonValuesOver([]byte(c.body), c.max); got != c.over {
			t.Errorf("jsonValuesOver(%.40q, %d) = %v, want %v", c.body, c.max, got, c.over)
		}
	}
}
