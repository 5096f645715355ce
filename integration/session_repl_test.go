package integration

import (
	"strings"
	"testing"
)

// TestSessionREPL (issue 30): a cell's last expression is its result, as
// a REPL shows it (Jupyter's execute_result); a cell timeout's traceback
// and an exception's show the cell's frames, not the worker's.
func TestSessionREPL(t *testing.T) {
	s := startSession(t, asRoot, "--cell-timeout", "500ms")
	result := func(rep map[string]any) any {
		r, _ := rep["result"].(map[string]any)
		if r == nil {
			return nil
		}
		return r["repr"]
	}
	for _, c := range []struct {
		code string
		want any
	}{
		{"x = 6\nx * 7", "42"},
		{"'a' + 'b'", "'ab'"},
		{"x = 1", nil},
		{"print('p')", nil},
		{"None", nil},
		{"[i for i in range(3)]", "[0, 1, 2]"},
		{"if True:\n    y = 2\ny", "2"},
	} {
		if got := result(s.exec(t, c.code)); got != c.want {
			t.Errorf("%q: result %v, want %v", c.code, got, c.want)
		}
	}
	rep := s.exec(t, "'x' * 100000")
	if r, _ := rep["result"].(map[string]any); r == nil || r["truncated"] != true || len(r["repr"].(string)) > 64<<10 {
		t.Errorf("a result of 100,000 characters: %.200v", rep)
	}
	rep = s.exec(t, "1/0\n2")
	if result(rep) != nil || errType(rep) != "ZeroDivisionError" {
		t.Errorf("a cell that raises has no result: %.300v", rep)
	}
	for _, code := range []string{"import time\ntime.sleep(5)", "def f():\n    raise KeyError('k')\ntry:\n    f()\nexcept KeyError as e:\n    raise ValueError('v') from e"} {
		rep = s.exec(t, code)
		e, _ := rep["error"].(map[string]any)
		tb, _ := e["traceback"].(string)
		if !strings.Contains(tb, `File "<cell>"`) || strings.Contains(tb, `File "<string>"`) || strings.Contains(tb, "_on_sigint") {
			t.Errorf("%q: the traceback shows frames that are not the cell's: %s", code, tb)
		}
	}
	s.close(t)
}
