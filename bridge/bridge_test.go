package bridge

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// echo answers every prompt with "re: " and the prompt, and a tool with
// its arguments.
type echo struct {
	delay time.Duration
	calls atomic.Int64
}

func (e *echo) Answer(ctx context.Context, req *Request) ([]json.RawMessage, error) {
	e.calls.Add(1)
	select {
	case <-time.After(e.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if req.ToolArgs != nil {
		b, _ := json.Marshal(req.ToolArgs)
		return []json.RawMessage{b}, nil
	}
	var out []json.RawMessage
	for _, p := range req.Prompts {
		b, _ := marshalNoHTML("re: " + p)
		out = append(out, b)
	}
	return out, nil
}

func TestServe(t *testing.T) {
	tools := []Tool{{Name: "search", Params: []string{"query", "k"}}}
	tests := []struct {
		name, call, args string
		wantType         string
		wantValue        string
	}{
		{"llm_query", LLMQuery, `{"prompt":"hi"}`, "", `"re: hi"`},
		{"llm_query with a model", LLMQuery, `{"prompt":"hi","model":"small"}`, "", `"re: hi"`},
		{"batched", LLMQueryBatched, `{"prompts":["a","b"]}`, "", `["re: a","re: b"]`},
		{"rlm_query", RLMQuery, `{"prompt":"x"}`, "", `"re: x"`},
		{"a tool", "search", `{"query":"q","k":3}`, "", `{"k":3,"query":"q"}`},
		{"a tool's unknown argument", "search", `{"nope":1}`, ErrBadCall, ""},
		{"an undeclared name", "os_system", `{}`, ErrBadCall, ""},
		{"a name with a newline", "x\n{\"event\":\"call\"}", `{}`, ErrBadCall, ""},
		{"not an object", LLMQuery, `["hi"]`, ErrBadCall, ""},
		{"prompt not a string", LLMQuery, `{"prompt":3}`, ErrBadCall, ""},
		{"prompts not strings", LLMQueryBatched, `{"prompts":[1]}`, ErrBadCall, ""},
		{"invalid UTF-8", LLMQuery, "{\"prompt\":\"\xff\xfe\"}", ErrBadCall, ""},
		{"an empty batch", LLMQueryBatched, `{"prompts":[]}`, ErrBadCall, ""},
		{"a batch of null", LLMQueryBatched, `{"prompts":null}`, ErrBadCall, ""},
		{"a batch without prompts", LLMQueryBatched, `{"model":"m"}`, ErrBadCall, ""},
		{"no prompt", LLMQuery, `{}`, ErrBadCall, ""},
		{"null arguments", LLMQuery, `null`, ErrBadCall, ""},
		{"a model not a string", LLMQuery, `{"prompt":"hi","model":3}`, ErrBadCall, ""},
		{"a model too long", LLMQuery, `{"prompt":"hi","model":"` + strings.Repeat("m", 201) + `"}`, ErrBadCall, ""},
		{"a null model", LLMQuery, `{"prompt":"hi","model":null}`, "", `"re: hi"`},
		{"an answer with markup", LLMQuery, `{"prompt":"<b>&"}`, "", `"re: <b>&"`},
		{"a batch with markup", LLMQueryBatched, `{"prompts":["<"]}`, "", `["re: <"]`},
		{"a prompt too long", LLMQuery, `{"prompt":"` + strings.Repeat("x", 101) + `"}`, ErrLLMBudget, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := New(Config{Tools: tools, MaxPromptChars: 100}, &echo{}, false)
			res := b.Serve(context.Background(), Call{ID: 1, Name: tc.call, Args: json.RawMessage(tc.args)})
			if res.ErrorType != tc.wantType {
				t.Fatalf("Serve = %+v, want error type %q", res, tc.wantType)
			}
			if tc.wantValue != "" && string(res.Value) != tc.wantValue {
				t.Errorf("value = %s, want %s", res.Value, tc.wantValue)
			}
			if strings.ContainsAny(res.Error, "\n\r") {
				t.Errorf("error %q breaks a line", res.Error)
			}
		})
	}
}

// TestBudgetRaced: 16 threads calling at once never get more answers
// than the budget, and each prompt of a batch counts.
func TestBudgetRaced(t *testing.T) {
	e := &echo{delay: time.Millisecond}
	b := New(Config{MaxLLMCalls: 50}, e, false)
	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				name, args := LLMQuery, `{"prompt":"p"}`
				if i%2 == 1 {
					name, args = LLMQueryBatched, `{"prompts":["a","b","c"]}`
				}
				res := b.Serve(context.Background(), Call{ID: int64(g*100 + i), Name: name, Args: json.RawMessage(args)})
				switch res.ErrorType {
				case "":
					if name == LLMQuery {
						ok.Add(1)
					} else {
						ok.Add(3)
					}
				case ErrLLMBudget:
					refused.Add(1)
				default:
					t.Errorf("unexpected %+v", res)
				}
			}
		}()
	}
	wg.Wait()
	if ok.Load() > 50 {
		t.Errorf("%d prompts answered, budget 50", ok.Load())
	}
	if c := b.Counts(); c.LLMCalls != int(ok.Load()) || c.LLMCalls > 50 {
		t.Errorf("counts %+v, answered %d", c, ok.Load())
	}
	if refused.Load() == 0 {
		t.Error("nothing refused")
	}
}

func TestCallTimeout(t *testing.T) {
	b := New(Config{CallTimeout: 50 * time.Millisecond}, &echo{delay: 5 * time.Second}, false)
	start := time.Now()
	res := b.Serve(context.Background(), Call{ID: 1, Name: LLMQuery, Args: json.RawMessage(`{"prompt":"p"}`)})
	if res.ErrorType != ErrTimeout || time.Since(start) > 2*time.Second {
		t.Fatalf("Serve = %+v after %v, want %s soon", res, time.Since(start), ErrTimeout)
	}
}

func TestAuditRecord(t *testing.T) {
	var recs []Record
	b := New(Config{Record: func(r Record) { recs = append(recs, r) }}, &echo{}, false)
	b.Serve(context.Background(), Call{ID: 3, Cell: 2, Name: LLMQuery, Args: json.RawMessage(`{"prompt":"secret prompt"}`)})
	if len(recs) != 1 || recs[0].Outcome != "ok" || recs[0].Cell != 2 || recs[0].PromptChars[0] != 13 || len(recs[0].PromptSHA256[0]) != 64 {
		t.Fatalf("records %+v", recs)
	}
	if recs[0].Prompts != nil {
		t.Errorf("the prompt text was recorded without --audit-prompts")
	}
}

func TestForwarder(t *testing.T) {
	events := make(chan Event, 4)
	f := NewForwarder(func(e Event) error { events <- e; return nil })
	b := New(Config{Tools: []Tool{{Name: "add", Params: []string{"a", "b"}}}}, f, false)
	go func() {
		e := <-events
		if args, _ := marshalNoHTML(e.Args); e.Name != "add" || string(args) != `{"a":1,"b":2}` {
			t.Errorf("event %+v", e)
		}
		if err := f.Deliver(e.Call, json.RawMessage(`3`), ""); err != nil {
			t.Error(err)
		}
		e = <-events
		_ = f.Deliver(e.Call, nil, "handler raised ValueError")
	}()
	res := b.Serve(context.Background(), Call{ID: 7, Name: "add", Args: json.RawMessage(`{"a":1,"b":2}`)})
	if res.ErrorType != "" || string(res.Value) != "3" {
		t.Fatalf("Serve = %+v", res)
	}
	res = b.Serve(context.Background(), Call{ID: 8, Name: "add", Args: json.RawMessage(`{"a":1}`)})
	if res.ErrorType != ErrFailed || !strings.Contains(res.Error, "ValueError") {
		t.Fatalf("Serve = %+v", res)
	}
	if err := f.Deliver(99, json.RawMessage(`1`), ""); err != ErrUnknownCall {
		t.Errorf("Deliver of no call = %v", err)
	}
}

func TestOpenAI(t *testing.T) {
	var mu sync.Mutex
	var inFlight, peak, n int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer sk-test" {
			http.Error(w, `{"error":{"message":"bad path or key"}}`, http.StatusUnauthorized)
			return
		}
		mu.Lock()
		n++
		first := n == 1
		inFlight++
		peak = max(peak, inFlight)
		mu.Unlock()
		defer func() { mu.Lock(); inFlight--; mu.Unlock() }()
		if first {
			http.Error(w, "overloaded", http.StatusServiceUnavailable) // retried
			return
		}
		var body struct {
			Model    string                     `json:"model"`
			Messages []struct{ Content string } `json:"messages"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		time.Sleep(20 * time.Millisecond)
		fmt.Fprintf(w, `{"choices":[{"message":{"role":"assistant","content":%q}}]}`, body.Model+":"+body.Messages[0].Content)
	}))
	defer srv.Close()
	o, err := NewOpenAI(srv.URL+"/v1", "m1", "sk-test", 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	b := New(Config{}, o, false)
	res := b.Serve(context.Background(), Call{ID: 1, Name: LLMQuery, Args: json.RawMessage(`{"prompt":"hi"}`)})
	if res.ErrorType != "" || string(res.Value) != `"m1:hi"` {
		t.Fatalf("Serve = %+v", res)
	}
	prompts, _ := json.Marshal(map[string]any{"prompts": []string{"a", "b", "c", "d", "e", "f", "g", "h"}, "model": "m2"})
	res = b.Serve(context.Background(), Call{ID: 2, Name: LLMQueryBatched, Args: prompts})
	var answers []string
	if res.ErrorType != "" || json.Unmarshal(res.Value, &answers) != nil || len(answers) != 8 || answers[7] != "m2:h" {
		t.Fatalf("batched Serve = %+v", res)
	}
	if peak > 3 {
		t.Errorf("%d requests at once, --llm-concurrency 3", peak)
	}
	bad, _ := NewOpenAI(srv.URL+"/v1", "m1", "wrong", 1, 0)
	res = New(Config{}, bad, false).Serve(context.Background(), Call{ID: 3, Name: LLMQuery, Args: json.RawMessage(`{"prompt":"x"}`)})
	if res.ErrorType != ErrFailed || !strings.Contains(res.Error, "401") || strings.Contains(res.Error, "wrong") {
		t.Errorf("Serve with a bad key = %+v", res)
	}
	for _, e := range []string{"ftp://x", "not a url", "http://"} {
		if _, err := NewOpenAI(e, "m", "", 1, 0); err == nil {
			t.Errorf("NewOpenAI(%q) accepted", e)
		}
	}
}

// TestOpenAIKeyEchoed: an endpoint that echoes the key (in an error body,
// in an answer) or fails the connection of a URL with a token in its query
// gets none of them into the call's result, which goes to the jail.
func TestOpenAIKeyEchoed(t *testing.T) {
	const key, token = "sk-echo-0123456789", "tok-0123456789"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Messages []struct{ Content string } `json:"messages"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		auth := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		switch body.Messages[0].Content {
		case "deny":
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintf(w, `{"error":{"message":"Incorrect API key provided: %s"}}`, auth)
		case "drop":
			c, _, _ := w.(http.Hijacker).Hijack()
			_ = c.Close()
		default:
			fmt.Fprintf(w, `{"choices":[{"message":{"role":"assistant","content":%q}}]}`, "you sent "+auth)
		}
	}))
	defer srv.Close()
	o, err := NewOpenAI(srv.URL+"/v1/chat/completions?token="+token, "m1", key, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := New(Config{}, o, false)
	for i, c := range []struct{ prompt, want string }{
		{"deny", "401"}, {"drop", "the model endpoint"}, {"echo", "you sent"},
	} {
		args, _ := json.Marshal(map[string]string{"prompt": c.prompt})
		res := b.Serve(context.Background(), Call{ID: int64(i + 1), Name: LLMQuery, Args: args})
		text := res.Error + string(res.Value)
		if strings.Contains(text, key) || strings.Contains(text, token) || !strings.Contains(text, c.want) {
			t.Errorf("%s: %+v", c.prompt, res)
		}
	}
}

func TestParseTool(t *testing.T) {
	for in, ok := range map[string]bool{"search": true, "search:q,k": true, "a b": false, "llm_query": false, "x:a,a": false, "x:1a": false, "": false} {
		if _, err := ParseTool(in); (err == nil) != ok {
			t.Errorf("ParseTool(%q) = %v", in, err)
		}
	}
}

// BenchmarkServe is one call through the bridge with an instant answer.
func BenchmarkServe(b *testing.B) {
	br := New(Config{MaxLLMCalls: b.N + 1}, &echo{}, false)
	args := json.RawMessage(`{"prompt":"hello"}`)
	for i := 0; i < b.N; i++ {
		br.Serve(context.Background(), Call{ID: int64(i), Name: LLMQuery, Args: args})
	}
}
