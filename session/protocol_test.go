package session

import (
	"strings"
	"testing"

	"github.com/rljail/rljail/bridge"
	"github.com/rljail/rljail/jail"
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

// TestFilePlaces: put_file writes below the writable places only (a
// read-only volume, even one inside a writable place, refused by name),
// get_file reads below those and the read-only volumes.
func TestFilePlaces(t *testing.T) {
	fp := placesOf(jail.Spec{Volumes: []jail.Volume{
		{Source: "/srv/out", Dest: "/out", Writable: true},
		{Source: "/srv/corpus", Dest: "/data/corpus"},
		{Source: "/srv/ref", Dest: "/out/ref"},
	}})
	for _, c := range []struct {
		p        string
		put, get string // "" allowed, else a word of the refusal
	}{
		{"/tmp/a", "", ""},
		{"/dev/shm/a", "", ""},
		{"/out/a", "", ""},
		{"/data/corpus/a.txt", "read-only volume /data/corpus", ""},
		{"/out/ref/a", "read-only volume /out/ref", ""},
		{"/data/corpus", "outside", "outside"},
		{"/data/x", "outside", "outside"},
		{"/etc/passwd", "outside the jail's writable places", "outside the places get_file reads"},
		{"/data/corpus/../../etc/passwd", "absolute, clean", "absolute, clean"},
		{"data/corpus/a", "absolute, clean", "absolute, clean"},
	} {
		for _, op := range []struct {
			name, want string
			err        *protocolError
		}{{"put_file", c.put, checkPutPath(c.p, fp)}, {"get_file", c.get, checkGetPath(c.p, fp)}} {
			switch {
			case op.want == "" && op.err != nil:
				t.Errorf("%s %s: refused (%s), want allowed", op.name, c.p, op.err.msg)
			case op.want != "" && (op.err == nil || op.err.typ != ErrBadPath || !strings.Contains(op.err.msg, op.want)):
				t.Errorf("%s %s: %v, want BadPath saying %q", op.name, c.p, op.err, op.want)
			}
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
