package session

import (
	"strings"
	"testing"

	"github.com/rljail/rljail/bridge"
)

func TestParseRequest(t *testing.T) {
	cases := []struct {
		line, typ, id string
	}{
		{`{"id":1,"op":"exec","code":"pass"}`, "", "1"},
		{`{"id":"a","op":"hello"}`, "", `"a"`},
		{`not json`, ErrBadRequest, ""},
		{`[1]`, ErrBadRequest, ""},
		{`{"op":"hello"}`, ErrBadRequest, ""},
		{`{"id":null,"op":"hello"}`, ErrBadRequest, "null"},
		{`{"id":{"x":1},"op":"hello"}`, ErrBadRequest, `{"x":1}`},
		{"{\"id\":1,\"op\":\"exec\",\"code\":\"\xff\"}", ErrBadRequest, ""},
		{`{"id":7,"op":"exec","code":3}`, ErrBadRequest, "7"},
		// A call_result's id is optional; its error must be a string.
		{`{"op":"call_result","call":7,"value":"x"}`, "", ""},
		{`{"id":2,"op":"call_result","call":7,"error":"down"}`, "", "2"},
		{`{"op":"call_result","call":7,"error":{"x":1}}`, ErrBadRequest, ""},
	}
	for _, c := range cases {
		req, err := parseRequest([]byte(c.line))
		typ := ""
		if err != nil {
			typ = err.typ
		}
		if typ != c.typ || string(req.ID) != c.id {
			t.Errorf("%q: type %q id %s, want %q %s", c.line, typ, req.ID, c.typ, c.id)
		}
	}
}

func TestCheckJailPath(t *testing.T) {
	places := []string{"/tmp", "/out"}
	for p, ok := range map[string]bool{
		"/tmp/a": true, "/out/x/y": true, "/tmp": false, "/etc/passwd": false, "/tmp/../etc": false,
		"tmp/a": false, "/tmpx/a": false, "/tmp/a\x00": false, "": false,
	} {
		if got := checkJailPath(p, places) == nil; got != ok {
			t.Errorf("%q: allowed %v, want %v", p, got, ok)
		}
	}
}

func TestCheckName(t *testing.T) {
	for n, ok := range map[string]bool{"x": true, "_a1": true, "1a": false, "": false, "a-b": false, "é": false, strings.Repeat("a", 256): false} {
		if got := checkName(n) == nil; got != ok {
			t.Errorf("%q: %v, want %v", n, got, ok)
		}
	}
}

// TestLineReader: a line over the cap is dropped whole and the next one
// reads.
func TestLineReader(t *testing.T) {
	in := "short\n" + strings.Repeat("x", 1000) + "\nnext\nlast"
	lr := newLineReader(strings.NewReader(in), 100)
	var got []string
	for {
		line, err := lr.next()
		if err == errLineTooLong {
			got = append(got, "TOO LONG")
			continue
		}
		if err != nil {
			break
		}
		got = append(got, string(line))
	}
	if want := []string{"short", "TOO LONG", "next", "last"}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestWorkerCommandTools: the runner's tools reach the worker as one JSON
// argument after its source, an empty list when there are none.
func TestWorkerCommandTools(t *testing.T) {
	for _, c := range []struct {
		tools []bridge.Tool
		want  string
	}{
		{nil, `[]`},
		{[]bridge.Tool{{Name: "search", Params: []string{"query", "k"}}, {Name: "now"}}, `[{"name":"search","params":["query","k"]},{"name":"now","params":[]}]`},
	} {
		argv := workerCommand("python3", c.tools, 1234)
		if len(argv) != 7 || argv[4] != workerSource || argv[5] != c.want || argv[6] != "1234" {
			t.Errorf("%v: argv tail %q, want %s 1234", c.tools, argv[5:], c.want)
		}
	}
}
