package serve

import (
	"net/http/httptest"
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

func TestBadJSONNamesNoGoTypes(t *testing.T) {
	cases := []struct{ body, want string }{
		{`[]`, "the body must be a JSON object, not an array"},
		{`5`, "the body must be a JSON object, not a number"},
		{`{"code":5}`, "field code must be a string, not a number"},
		{`{"files":{"a":"b"}}`, "field files must be an array of objects, not an object"},
		{`{"command":"ls"}`, "field command must be an array of strings, not a string"},
		{`{"limits":{"memory_bytes":1e400}}`, "field limits.memory_bytes must be an integer of 64 bits, not the number 1e400"},
		{`{"files":[{"path":"a","executable":"yes"}]}`, "field files.executable must be true or false, not a string"},
		{`{"env":{"A":1}}`, "field env must be a string, not a number"},
	}
	for _, c := range cases {
		r := httptest.NewRequest("POST", "/v1/run", strings.NewReader(c.body))
		var req RunRequest
		code, err := decodeStrict(r, &req)
		if code != 400 || err == nil || err.Error() != c.want {
			t.Errorf("%s: %d %v, want 400 %q", c.body, code, err, c.want)
		}
	}
}
