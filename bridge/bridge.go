// Package bridge serves the calls that jailed code makes to the host:
// llm_query and llm_query_batched (a model's answer), rlm_query and
// rlm_query_batched (a child RLM's), and the host tools a runner
// declared. The jail has no network and never holds an API key, so each
// call crosses the boundary as a request that the host decides to serve,
// counts and may refuse.
//
// A call comes from the jail and is hostile data: its name must be one
// the runner allowed, its arguments must have the declared shape, and
// every budget (calls, prompt sizes, a per-call timeout) is enforced here,
// on the host, before anything is sent anywhere. A prompt-injected loop
// that calls llm_query ten thousand times is a billing attack; the budget
// is reserved before a call is answered, so threads racing inside the jail
// cannot pass it either.
//
// Answering is an Answerer's job: Forwarder hands each call to the runner
// (the session protocol's call events), OpenAI calls an OpenAI-compatible
// chat-completions endpoint itself with a key read from the host's
// environment.
package bridge

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// The call names every session knows; tools add their own.
const (
	LLMQuery        = "llm_query"
	LLMQueryBatched = "llm_query_batched"
	RLMQuery        = "rlm_query"
	RLMQueryBatched = "rlm_query_batched"
)

// Error types a call can end with, as the jailed side raises them (the
// worker turns each into an exception of that name).
const (
	ErrLLMBudget  = "LLMBudgetExceeded"  // --max-llm-calls or --max-llm-prompt-chars
	ErrToolBudget = "ToolBudgetExceeded" // --max-tool-calls
	ErrBadCall    = "BadCall"            // unknown name, wrong arguments
	ErrTimeout    = "CallTimeout"        // the per-call timeout passed
	ErrFailed     = "CallFailed"         // the answerer failed (its message says why)
)

// Defaults for a zero Config.
const (
	DefaultMaxLLMCalls  = 50 // as DSPy's RLM
	DefaultMaxToolCalls = 100
	DefaultCallTimeout  = 120 * time.Second
	// DefaultMaxResultBytes is Config.MaxResultBytes's default.
	DefaultMaxResultBytes = 8 << 20
	// DefaultMaxPromptChars bounds one prompt; a batch's prompts count
	// one by one.
	DefaultMaxPromptChars = 1 << 20
	// MaxBatch is the most prompts one batched call may carry.
	MaxBatch = 1024
)

// Tool is a host tool the runner declared: jailed code calls it by name
// with these parameters.
type Tool struct {
	Name   string
	Params []string
}

// isIdentifier reports whether s is an ASCII Python identifier of at most
// 64 characters (no regexp: its compilation at package init cost every
// run of the binary 0.2 ms).
func isIdentifier(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// pythonKeywords are Python 3's keywords (keyword.kwlist): no name a
// cell can call, nor a parameter it can pass by name.
var pythonKeywords = map[string]bool{
	"False": true, "None": true, "True": true, "and": true, "as": true, "assert": true, "async": true,
	"await": true, "break": true, "class": true, "continue": true, "def": true, "del": true, "elif": true,
	"else": true, "except": true, "finally": true, "for": true, "from": true, "global": true, "if": true,
	"import": true, "in": true, "is": true, "lambda": true, "nonlocal": true, "not": true, "or": true,
	"pass": true, "raise": true, "return": true, "try": true, "while": true, "with": true, "yield": true,
}

// ParseTool parses a --tool value: NAME or NAME:param1,param2.
func ParseTool(s string) (Tool, error) {
	name, params, _ := strings.Cut(s, ":")
	t := Tool{Name: name}
	if !isIdentifier(name) {
		return t, fmt.Errorf("--tool %q: the name must be a Python identifier", s)
	}
	switch name {
	case LLMQuery, LLMQueryBatched, RLMQuery, RLMQueryBatched, "SUBMIT", "FINAL", "FINAL_VAR", "print":
		return t, fmt.Errorf("--tool %q: %s is a name the session defines itself", s, name)
	}
	// A dunder name is Python's own (a tool named __builtins__ took every
	// cell's builtins away), and a keyword no cell can call.
	if strings.HasPrefix(name, "__") && strings.HasSuffix(name, "__") {
		return t, fmt.Errorf("--tool %q: %s is one of Python's own names (__...__)", s, name)
	}
	if pythonKeywords[name] {
		return t, fmt.Errorf("--tool %q: %s is a Python keyword, which no cell could call", s, name)
	}
	if params != "" {
		seen := map[string]bool{}
		for _, p := range strings.Split(params, ",") {
			if !isIdentifier(p) || seen[p] || pythonKeywords[p] {
				return t, fmt.Errorf("--tool %q: parameter %q is not a Python identifier, or a keyword, or repeated", s, p)
			}
			seen[p] = true
			t.Params = append(t.Params, p)
		}
	}
	return t, nil
}

// Config is a bridge's policy. Zero fields take the defaults; a negative
// budget means none may be made.
type Config struct {
	MaxLLMCalls    int // each prompt of a batch counts
	MaxToolCalls   int
	MaxPromptChars int // per prompt, in characters (code points)
	CallTimeout    time.Duration
	// MaxResultBytes caps what one call's answers come to, in bytes of
	// JSON (a batch's together): over it the call fails, and nothing of
	// the answer is held for the jail.
	MaxResultBytes int
	Tools          []Tool
	// Record, when set, receives one record per call (the audit log).
	Record func(Record)
}

// Call is one call from the jail.
type Call struct {
	ID   int64           // the session's number for it
	Cell int             // the cell it came from
	Name string          // llm_query, ..., or a tool's name
	Args json.RawMessage // a JSON object
}

// Request is a call as the Answerer gets it: checked and counted.
type Request struct {
	Call
	// Prompts are the prompts of an LLM or RLM call (one unless
	// batched); Model the model asked for, if any.
	Prompts []string
	Model   string
	Batched bool
	// ToolArgs are a tool call's arguments by parameter name.
	ToolArgs map[string]json.RawMessage
	// held counts the answers the session's calls hold at once (the
	// Bridge's; OpenAI bounds them).
	held *heldBytes
}

// Answerer answers a checked call: an LLM call with one answer per prompt
// (a JSON string each), a tool call with one JSON value.
type Answerer interface {
	Answer(ctx context.Context, req *Request) ([]json.RawMessage, error)
}

// Result is the outcome of one call, as it goes back to the jail.
type Result struct {
	Value     json.RawMessage `json:"value,omitempty"`
	ErrorType string          `json:"error_type,omitempty"`
	Error     string          `json:"error,omitempty"`
}

// Counts are a session's calls so far, as each exec reply carries them.
type Counts struct {
	LLMCalls    int `json:"llm_calls"`
	ToolCalls   int `json:"tool_calls"`
	PromptChars int `json:"prompt_chars"`
	Refused     int `json:"refused"`
}

// Record is one call for the audit log: never the prompt text unless the
// runner asked (Prompts).
type Record struct {
	Time          time.Time `json:"time"`
	Cell          int       `json:"cell"`
	Call          int64     `json:"call"`
	Name          string    `json:"name"`
	PromptChars   []int     `json:"prompt_chars,omitempty"`
	PromptSHA256  []string  `json:"prompt_sha256,omitempty"`
	Prompts       []string  `json:"prompts,omitempty"`
	LatencyMS     int64     `json:"latency_ms"`
	Outcome       string    `json:"outcome"` // ok or an error type
	Error         string    `json:"error,omitempty"`
	ResponseChars int       `json:"response_chars,omitempty"`
}

// Bridge checks, counts and dispatches calls. It is safe for concurrent
// use: a cell may call from several threads at once.
type Bridge struct {
	cfg     Config
	answer  Answerer
	tools   map[string]Tool
	prompts bool // record prompt texts

	mu     sync.Mutex
	counts Counts
	held   heldBytes // the answers an OpenAI holds for this session's calls
}

// New returns a Bridge with cfg's policy that answers through a.
// recordPrompts puts the prompt texts into the audit records
// (--audit-prompts).
func New(cfg Config, a Answerer, recordPrompts bool) *Bridge {
	if cfg.MaxLLMCalls == 0 {
		cfg.MaxLLMCalls = DefaultMaxLLMCalls
	}
	if cfg.MaxToolCalls == 0 {
		cfg.MaxToolCalls = DefaultMaxToolCalls
	}
	if cfg.MaxPromptChars == 0 {
		cfg.MaxPromptChars = DefaultMaxPromptChars
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.MaxResultBytes <= 0 {
		cfg.MaxResultBytes = DefaultMaxResultBytes
	}
	b := &Bridge{cfg: cfg, answer: a, tools: map[string]Tool{}, prompts: recordPrompts}
	for _, t := range cfg.Tools {
		b.tools[t.Name] = t
	}
	return b
}

// Tools lists the declared tools (the worker defines one function each).
func (b *Bridge) Tools() []Tool { return append([]Tool(nil), b.cfg.Tools...) }

// Limits describes the budgets in force (for hello).
func (b *Bridge) Limits() map[string]any {
	return map[string]any{
		"max_llm_calls":        b.cfg.MaxLLMCalls,
		"max_tool_calls":       b.cfg.MaxToolCalls,
		"max_llm_prompt_chars": b.cfg.MaxPromptChars,
		"call_timeout_ms":      b.cfg.CallTimeout.Milliseconds(),
	}
}

// Counts returns the session's counts so far.
func (b *Bridge) Counts() Counts {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.counts
}

// Serve checks call, reserves its budget, has it answered within the
// per-call timeout and returns what goes back to the jail. It never
// returns an error: every failure is a Result the jailed side raises.
func (b *Bridge) Serve(ctx context.Context, call Call) Result {
	start := time.Now()
	rec := Record{Time: start.UTC(), Cell: call.Cell, Call: call.ID, Name: call.Name}
	req, res := b.check(call)
	if req != nil {
		for _, p := range req.Prompts {
			sum := sha256.Sum256([]byte(p))
			rec.PromptChars = append(rec.PromptChars, utf8.RuneCountInString(p))
			rec.PromptSHA256 = append(rec.PromptSHA256, hex.EncodeToString(sum[:]))
		}
		if b.prompts {
			rec.Prompts = req.Prompts
		}
	}
	if res.ErrorType == "" {
		res = b.dispatch(ctx, req)
	}
	if res.ErrorType != "" {
		b.mu.Lock()
		b.counts.Refused++
		b.mu.Unlock()
	}
	rec.LatencyMS = time.Since(start).Milliseconds()
	rec.Outcome, rec.Error = "ok", res.Error
	if res.ErrorType != "" {
		rec.Outcome = res.ErrorType
	}
	rec.ResponseChars = len(res.Value)
	if b.cfg.Record != nil {
		b.cfg.Record(rec)
	}
	return res
}

func (b *Bridge) dispatch(ctx context.Context, req *Request) Result {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.CallTimeout)
	defer cancel()
	values, err := b.answer.Answer(ctx, req)
	switch {
	case errors.Is(err, context.DeadlineExceeded) || (err == nil && ctx.Err() != nil):
		return Result{ErrorType: ErrTimeout, Error: fmt.Sprintf("%s got no answer within %s", req.Name, b.cfg.CallTimeout)}
	case err != nil:
		return Result{ErrorType: ErrFailed, Error: oneLine(err.Error(), 1000)}
	}
	isLLM := req.ToolArgs == nil
	if isLLM && len(values) != len(req.Prompts) {
		return Result{ErrorType: ErrFailed, Error: fmt.Sprintf("%s: %d answers for %d prompts", req.Name, len(values), len(req.Prompts))}
	}
	if !isLLM && len(values) != 1 {
		return Result{ErrorType: ErrFailed, Error: fmt.Sprintf("%s: no single result", req.Name)}
	}
	size := 0
	for _, v := range values {
		size += len(v) + 1
		if size > b.cfg.MaxResultBytes {
			return Result{ErrorType: ErrFailed, Error: fmt.Sprintf("%s: the answer is over the %d bytes of JSON one call's result may be", req.Name, b.cfg.MaxResultBytes)}
		}
		if !json.Valid(v) {
			return Result{ErrorType: ErrFailed, Error: req.Name + ": the answer is not JSON"}
		}
	}
	if !isLLM || !req.Batched {
		return Result{Value: values[0]}
	}
	out, err := marshalNoHTML(values)
	if err != nil {
		return Result{ErrorType: ErrFailed, Error: err.Error()}
	}
	return Result{Value: out}
}

// check validates call and reserves its budget. On refusal res carries
// the error.
func (b *Bridge) check(call Call) (req *Request, res Result) {
	bad := func(format string, a ...any) (*Request, Result) {
		return nil, Result{ErrorType: ErrBadCall, Error: oneLine(fmt.Sprintf(format, a...), 300)}
	}
	if !utf8.Valid(call.Args) || !utf8.ValidString(call.Name) {
		return bad("%s: the call is not valid UTF-8", safeName(call.Name))
	}
	if t := bytes.TrimLeft(call.Args, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return bad("%s: the arguments are not a JSON object", safeName(call.Name))
	}
	req = &Request{Call: call, held: &b.held}
	// What the answerer needs is decoded below, once, straight from the
	// call's JSON; the raw arguments are not held for the call's whole
	// wait as well.
	req.Args = nil
	switch call.Name {
	case LLMQuery, RLMQuery, LLMQueryBatched, RLMQueryBatched:
		var a struct {
			Prompt  *string   `json:"prompt"`
			Prompts *[]string `json:"prompts"`
			Model   *string   `json:"model"`
		}
		err := json.Unmarshal(call.Args, &a)
		var te *json.UnmarshalTypeError
		batched := call.Name == LLMQueryBatched || call.Name == RLMQueryBatched
		switch {
		case errors.As(err, &te) && te.Field == "model":
			return bad("%s: model must be a string or None", call.Name)
		case err != nil && !errors.As(err, &te):
			return bad("%s: the arguments are not a JSON object", safeName(call.Name))
		case !batched && (a.Prompt == nil || (te != nil && te.Field == "prompt")):
			return bad("%s(prompt): prompt must be a string", call.Name)
		case batched && (a.Prompts == nil || (te != nil && te.Field == "prompts")):
			return bad("%s(prompts): prompts must be a list of strings", call.Name)
		case te != nil:
			return bad("%s: the arguments are not what it takes", call.Name)
		}
		if a.Model != nil {
			if len(*a.Model) > 200 {
				return bad("%s: model must be a string or None", call.Name)
			}
			req.Model = *a.Model
		}
		if !batched {
			req.Prompts = []string{*a.Prompt}
			break
		}
		ps := *a.Prompts
		if len(ps) > MaxBatch {
			return bad("%s: %d prompts, more than the %d one call may carry", call.Name, len(ps), MaxBatch)
		}
		if len(ps) == 0 {
			// It would cost no budget and still reach the runner (the worker answers
			// an empty batch with [] itself, without a call).
			return bad("%s: no prompts: a batch needs at least one", call.Name)
		}
		req.Prompts, req.Batched = ps, true
	default:
		t, ok := b.tools[call.Name]
		if !ok {
			return bad("no host function %q: the runner declared none of that name", safeName(call.Name))
		}
		var args map[string]json.RawMessage
		if err := json.Unmarshal(call.Args, &args); err != nil || args == nil {
			return bad("%s: the arguments are not a JSON object", safeName(call.Name))
		}
		req.ToolArgs = map[string]json.RawMessage{}
		for k, v := range args {
			if !slices.Contains(t.Params, k) {
				return bad("%s() got an unexpected argument %q", t.Name, safeName(k))
			}
			req.ToolArgs[k] = v
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.counts.ToolCalls+1 > b.cfg.MaxToolCalls || b.cfg.MaxToolCalls < 0 {
			return nil, Result{ErrorType: ErrToolBudget, Error: fmt.Sprintf("the session's %d tool calls are spent", max(b.cfg.MaxToolCalls, 0))}
		}
		b.counts.ToolCalls++
		return req, Result{}
	}
	chars := 0
	for i, p := range req.Prompts {
		n := utf8.RuneCountInString(p)
		if n > b.cfg.MaxPromptChars {
			return nil, Result{ErrorType: ErrLLMBudget, Error: fmt.Sprintf("%s: prompt %d has %d characters, more than --max-llm-prompt-chars %d", call.Name, i, n, b.cfg.MaxPromptChars)}
		}
		chars += n
	}
	// Reserve the whole batch at once: threads racing in the jail cannot
	// pass the budget between a check and a count.
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cfg.MaxLLMCalls < 0 || b.counts.LLMCalls+len(req.Prompts) > b.cfg.MaxLLMCalls {
		left := max(b.cfg.MaxLLMCalls-b.counts.LLMCalls, 0)
		return nil, Result{ErrorType: ErrLLMBudget, Error: fmt.Sprintf("%s: %d prompts asked, %d of the session's %d model calls left", call.Name, len(req.Prompts), left, max(b.cfg.MaxLLMCalls, 0))}
	}
	b.counts.LLMCalls += len(req.Prompts)
	b.counts.PromptChars += chars
	return req, Result{}
}

// safeName quotes a name from the jail for an error message: short, and
// without anything that could break a line.
func safeName(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	q, _ := json.Marshal(s)
	return string(q[1 : len(q)-1])
}

// oneLine is s made one line (cleanLine) and cut to max characters
// (cutRunes). Text that may carry a secret is redacted between the two.
func oneLine(s string, max int) string {
	return cutRunes(cleanLine(s), max)
}

// cleanLine turns line breaks into spaces and drops other control
// characters: first, so that a redaction after it sees the text as the
// jail will (no control character left to drop would join two pieces of
// a secret).
func cleanLine(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\r':
			return ' '
		case r < 0x20 || r == 0x7f:
			return -1
		}
		return r
	}, s)
}

// cutRunes cuts s to max characters, marking the cut with "...".
func cutRunes(s string, max int) string {
	n := 0
	for i := range s {
		if n == max {
			return s[:i] + "..."
		}
		n++
	}
	return s
}
