package session

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/rljail/rljail/bridge"
)

// TestProtocolDocExamples holds every example line of
// docs/session-protocol.md to the protocol's types: each request (->)
// decodes as a Request and each reply or event (<-) as the type of its
// request's op, with no field the type does not have ("..." in an example
// stands for fields left out).
func TestProtocolDocExamples(t *testing.T) {
	doc, err := os.ReadFile("../docs/session-protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	type example struct {
		arrow, text string
		line        int
	}
	var examples []example
	lines := strings.Split(string(doc), "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "-> {") && !strings.HasPrefix(l, "<- {") {
			continue
		}
		ex := example{arrow: l[:2], text: l[3:], line: i + 1}
		// A reply goes on over the indented lines that follow it.
		for ex.arrow == "<-" && i+1 < len(lines) && strings.HasPrefix(lines[i+1], "        ") {
			i++
			ex.text += strings.TrimSpace(lines[i])
		}
		examples = append(examples, ex)
	}
	if len(examples) < 30 {
		t.Fatalf("found %d examples in the doc, want its 30 or more", len(examples))
	}
	strict := func(text string, v any) error {
		text = strings.ReplaceAll(text, ", ...}", "}")
		text = strings.ReplaceAll(text, ", ...", "")
		dec := json.NewDecoder(bytes.NewReader([]byte(text)))
		dec.DisallowUnknownFields()
		return dec.Decode(v)
	}
	ops := map[string]string{} // id -> op of the latest request with it
	for _, ex := range examples {
		if ex.arrow == "->" {
			var req Request
			if err := strict(ex.text, &req); err != nil {
				t.Errorf("line %d: the request does not decode as a Request: %v\n%s", ex.line, err, ex.text)
			}
			ops[string(req.ID)] = req.Op
			continue
		}
		var head struct {
			ID    json.RawMessage `json:"id"`
			OK    *bool           `json:"ok"`
			Event string          `json:"event"`
		}
		if err := json.Unmarshal([]byte(strings.ReplaceAll(ex.text, ", ...}", "}")), &head); err != nil {
			t.Errorf("line %d: not JSON: %v\n%s", ex.line, err, ex.text)
			continue
		}
		var v any
		op := ops[string(head.ID)]
		switch {
		case head.Event == "call":
			v = &bridge.Event{}
		case head.Event == "closed":
			v = &ClosedEvent{}
		case head.OK != nil && !*head.OK && op != "exec":
			v = &ErrorReply{}
		default:
			v = map[string]any{
				"hello": &HelloReply{}, "exec": &ExecReply{}, "set": &AckReply{}, "get": &GetReply{},
				"load_context": &LoadContextReply{}, "put_file": &PutFileReply{}, "get_file": &GetFileReply{},
				"interrupt": &InterruptReply{}, "close": &CloseReply{}, "call_result": &AckReply{},
			}[op]
		}
		if v == nil {
			t.Errorf("line %d: a reply to no request of the doc's (id %s)", ex.line, head.ID)
			continue
		}
		if err := strict(ex.text, v); err != nil {
			t.Errorf("line %d: the reply to %s does not decode as %T: %v\n%s", ex.line, op, v, err, ex.text)
		}
	}
}
