package bridge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
)

// Event is a call handed to the runner on the session protocol:
// {"event":"call","call":7,"name":"llm_query","args":{...}}. Name and
// Args are the checked call's: Args is what the bridge decoded, encoded
// once as the event's line is (well-formed JSON whatever the jail sent,
// and no second copy of a large prompt held while it is written).
type Event struct {
	Event string `json:"event"`
	Call  int64  `json:"call"`
	Cell  int    `json:"cell"`
	Name  string `json:"name"`
	Args  any    `json:"args"`
}

// Forwarder answers calls by handing them to the runner (--llm client,
// and every tool call): Emit writes the event, and the runner's
// call_result reaches Deliver. It is safe for concurrent use.
type Forwarder struct {
	emit    func(Event) error
	mu      sync.Mutex
	pending map[int64]chan Result
}

// NewForwarder returns a Forwarder that writes events with emit.
func NewForwarder(emit func(Event) error) *Forwarder {
	return &Forwarder{emit: emit, pending: map[int64]chan Result{}}
}

// ErrUnknownCall is Deliver's answer to a call_result for no call in
// flight (answered already, timed out, or never made).
var ErrUnknownCall = errors.New("no call of that number is waiting for its result")

// Answer emits req as an event and waits for its result.
func (f *Forwarder) Answer(ctx context.Context, req *Request) ([]json.RawMessage, error) {
	args := canonicalArgs(req)
	ch := make(chan Result, 1)
	f.mu.Lock()
	f.pending[req.ID] = ch
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.pending, req.ID)
		f.mu.Unlock()
	}()
	if err := f.emit(Event{Event: "call", Call: req.ID, Cell: req.Cell, Name: req.Name, Args: args}); err != nil {
		return nil, fmt.Errorf("hand the call to the runner: %w", err)
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case r := <-ch:
		if r.ErrorType != "" || r.Error != "" {
			return nil, errors.New(r.Error)
		}
		if !json.Valid(r.Value) {
			return nil, errors.New("the runner's result is not JSON")
		}
		if req.Batched {
			var list []json.RawMessage
			if err := json.Unmarshal(r.Value, &list); err != nil || len(list) != len(req.Prompts) {
				return nil, fmt.Errorf("the runner's result for %s is not a list of %d answers", req.Name, len(req.Prompts))
			}
			return list, nil
		}
		return []json.RawMessage{r.Value}, nil
	}
}

// Deliver hands the runner's call_result for call to the call waiting for
// it: value, or errMsg when the runner's handler failed.
func (f *Forwarder) Deliver(call int64, value json.RawMessage, errMsg string) error {
	f.mu.Lock()
	ch, ok := f.pending[call]
	if ok {
		delete(f.pending, call)
	}
	f.mu.Unlock()
	if !ok {
		return ErrUnknownCall
	}
	if errMsg != "" {
		ch <- Result{ErrorType: ErrFailed, Error: oneLine(errMsg, 1000)}
	} else {
		if len(value) == 0 {
			value = json.RawMessage("null")
		}
		ch <- Result{Value: value}
	}
	return nil
}

// canonicalArgs are a checked call's arguments as the runner's event
// carries them.
func canonicalArgs(req *Request) any {
	switch {
	case req.ToolArgs != nil:
		return req.ToolArgs
	case req.Batched:
		return map[string]any{"prompts": req.Prompts, "model": nullable(req.Model)}
	default:
		return map[string]any{"prompt": req.Prompts[0], "model": nullable(req.Model)}
	}
}

// marshalNoHTML is json.Marshal without its HTML escaping: a '<' of the
// jail's is one byte in the runner's event, not six.
func marshalNoHTML(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// Router sends the model calls to one Answerer and the tool calls to
// another (with --llm openai, tools still go to the runner).
type Router struct {
	LLM, Tools Answerer
}

// Answer dispatches req by its kind.
func (r Router) Answer(ctx context.Context, req *Request) ([]json.RawMessage, error) {
	if req.ToolArgs != nil {
		return r.Tools.Answer(ctx, req)
	}
	return r.LLM.Answer(ctx, req)
}
