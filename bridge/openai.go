package bridge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// OpenAI answers LLM calls by calling an OpenAI-compatible
// chat-completions endpoint from the host, with a key the jail never
// sees. It is safe for concurrent use; at most Concurrency requests are
// in flight at once, across every call of the session.
//
// net/http rather than an SDK: one POST and one decode are all a call
// needs, and the binary every run starts stays small.
type OpenAI struct {
	endpoint string // the chat-completions URL
	model    string
	key      string
	redactor *Redactor
	retries  int
	client   *http.Client
	sem      chan struct{}
	// held counts the answers of the calls that come without a session's
	// own count (Request.held): an OpenAI used outside a Bridge.
	held heldBytes
}

// DefaultConcurrency is --llm-concurrency's default.
const DefaultConcurrency = 8

// maxResponse bounds one response body read from the endpoint: with
// DefaultConcurrency requests at once, 32 MiB of bodies at most per
// session (a call's answers together are held to Config.MaxResultBytes).
const maxResponse = 4 << 20

// maxAnswersHeld bounds the answers held at once, across a session's
// calls (a Bridge's, which every call's Request carries): a batch's answers wait for its last one, so without it a few
// batches of large answers (a model told to repeat a text) held
// maxResponse times every prompt in flight. A call whose answer would
// pass it fails at once, and its other prompts are cancelled.
const maxAnswersHeld = 32 << 20

// NewOpenAI returns an Answerer for the endpoint (a base URL such as
// http://127.0.0.1:8000/v1, or the full .../chat/completions URL), the
// default model, and key (sent as a bearer token; empty sends none).
// concurrency <= 0 takes DefaultConcurrency; retries is how many times a
// request that failed for a reason worth retrying (a network error, 429,
// a 5xx) is tried again.
func NewOpenAI(endpoint, model, key string, concurrency, retries int) (*OpenAI, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--llm-endpoint %q is not an http:// or https:// URL", endpoint)
	}
	if model == "" {
		return nil, errors.New("--llm openai needs --llm-model NAME")
	}
	if !strings.HasSuffix(u.Path, "/chat/completions") {
		u.Path = strings.TrimSuffix(u.Path, "/") + "/chat/completions"
	}
	if concurrency <= 0 {
		concurrency = DefaultConcurrency
	}
	if retries < 0 {
		retries = 0
	}
	// What the endpoint says is redacted of the key and of what the URL
	// carries as a credential (a password, a query's values), before any
	// cut.
	secrets := []string{key}
	if p, ok := u.User.Password(); ok {
		secrets = append(secrets, p)
	}
	for _, vs := range u.Query() {
		secrets = append(secrets, vs...)
	}
	return &OpenAI{
		endpoint: u.String(), model: model, key: key, retries: retries, redactor: NewRedactor(secrets...),
		client: &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: concurrency, IdleConnTimeout: 30 * time.Second}},
		sem:    make(chan struct{}, concurrency),
	}, nil
}

// Answer asks the model once per prompt, the prompts of a batch
// concurrently.
func (o *OpenAI) Answer(ctx context.Context, req *Request) ([]json.RawMessage, error) {
	if req.ToolArgs != nil {
		return nil, fmt.Errorf("%s is a tool: --llm openai answers only the model calls", req.Name)
	}
	model := o.model
	if req.Model != "" {
		model = req.Model
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := make([]json.RawMessage, len(req.Prompts))
	errs := make([]error, len(req.Prompts))
	held := req.held
	if held == nil {
		held = &o.held
	}
	var mine int // bytes of this call's answers counted in held
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, p := range req.Prompts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			text, err := o.complete(ctx, model, p)
			var v json.RawMessage
			if err == nil {
				v, err = marshalNoHTML(o.redact(text))
			}
			if err == nil {
				err = held.add(len(v))
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs[i] = err
				// The call fails whole: its other prompts stop.
				cancel()
				return
			}
			out[i] = v
			mine += len(v)
		}()
	}
	wg.Wait()
	_ = held.add(-mine)
	// The first error that is not the cancellation of the others.
	var first error
	firstAt := 0
	for i, err := range errs {
		if err != nil && (first == nil || errors.Is(first, context.Canceled) && !errors.Is(err, context.Canceled)) {
			first, firstAt = err, i
		}
	}
	if first != nil {
		if len(req.Prompts) > 1 {
			first = fmt.Errorf("prompt %d: %w", firstAt, first)
		}
		return nil, redactedError{first, o.redact(cleanLine(first.Error()))}
	}
	return out, nil
}

// heldBytes counts the bytes of answers held, until their call's Answer
// returns.
type heldBytes struct {
	mu sync.Mutex
	n  int
}

// add counts n more bytes (n < 0 gives them back); over maxAnswersHeld
// it refuses.
func (h *heldBytes) add(n int) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n > 0 && h.n+n > maxAnswersHeld {
		return fmt.Errorf("the model's answers held at once would pass %d bytes (this one is %d)", maxAnswersHeld, n)
	}
	h.n += n
	return nil
}

// redact takes the key (and every fragment of it: Redactor) out of text
// bound for the jail: an endpoint may echo the key it was sent (an error
// body such as "Incorrect API key provided: sk-...", a proxy that
// reflects the request), and what the endpoint says reaches the cell as
// the answer or as CallFailed's message, and the audit log.
func (o *OpenAI) redact(text string) string {
	return o.redactor.Redact(text)
}

// redactedError is an error whose text had the key taken out; it still
// unwraps to the error it came from (a deadline stays a deadline).
type redactedError struct {
	err  error
	text string
}

func (e redactedError) Error() string { return e.text }
func (e redactedError) Unwrap() error { return e.err }

// complete asks for one chat completion, retrying what is worth it.
func (o *OpenAI) complete(ctx context.Context, model, prompt string) (string, error) {
	body, err := json.Marshal(map[string]any{
		"model":    model,
		"messages": []map[string]string{{"role": "user", "content": prompt}},
	})
	if err != nil {
		return "", err
	}
	var last error
	for attempt := 0; attempt <= o.retries; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return "", ctx.Err()
			case <-time.After(time.Duration(attempt) * 500 * time.Millisecond):
			}
		}
		select {
		case o.sem <- struct{}{}:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		text, retry, err := o.post(ctx, body)
		<-o.sem
		if err == nil {
			return text, nil
		}
		last = err
		if !retry || ctx.Err() != nil {
			break
		}
	}
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	return "", last
}

func (o *OpenAI) post(ctx context.Context, body []byte) (text string, retry bool, err error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, o.endpoint, bytes.NewReader(body))
	if err != nil {
		return "", false, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	if o.key != "" {
		hreq.Header.Set("Authorization", "Bearer "+o.key)
	}
	resp, err := o.client.Do(hreq)
	if err != nil {
		// The key is a header, never in this text; the URL is left out
		// too: the jail gets this message, and a URL may carry a
		// credential in its query.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = fmt.Errorf("%s: %w", ue.Op, ue.Err)
		}
		return "", true, fmt.Errorf("the model endpoint: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))
	if err != nil {
		return "", true, fmt.Errorf("read the model's answer: %w", err)
	}
	if len(data) > maxResponse {
		return "", false, fmt.Errorf("the model's answer is larger than %d bytes", maxResponse)
	}
	if resp.StatusCode != http.StatusOK {
		retry := resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500
		// Redacted before the cut: a cut first could split the key (the
		// cell chooses the length of the model name an error echoes).
		return "", retry, fmt.Errorf("the model endpoint answered %s: %s", o.redact(oneLine(resp.Status, 100)), cutRunes(o.redact(cleanLine(apiError(data))), 300))
	}
	var r struct {
		Choices []struct {
			Message struct {
				Content *string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return "", false, fmt.Errorf("the model's answer is not chat-completions JSON: %v", err)
	}
	if len(r.Choices) == 0 || r.Choices[0].Message.Content == nil {
		return "", false, errors.New("the model's answer has no choices[0].message.content")
	}
	return *r.Choices[0].Message.Content, false, nil
}

// apiError is the message of an OpenAI-style error body, or the body.
func apiError(data []byte) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(data, &e) == nil && e.Error.Message != "" {
		return e.Error.Message
	}
	return string(data)
}
