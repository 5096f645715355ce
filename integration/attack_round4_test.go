package integration

// Red-team round 4: the surfaces behind a session (the bridge's model
// endpoint, the worker's claims about a cell) and the Python client. Every
// case decides from the host: what the supervisor wrote on the session's
// stdout (a secret that appears there reached the jail: nothing else there
// knew it), and what the supervisor itself measured.

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func init() {
	attackCases = append(attackCases, []attackCase{
		{name: "bridge_llm_key_echoed", group: groupSecrets,
			mechanism: "with --llm openai, the endpoint echoes what it was sent: a 401 whose error message holds the key (\"Incorrect API key provided: sk-...\"), an answer that quotes the Authorization header, and a dropped connection whose error names the endpoint's URL with a token in its query; the cell prints every answer and CallFailed message it gets",
			layer:     "bridge.OpenAI takes the key out of every answer and error text bound for the jail, and leaves the URL out of a transport error",
			run:       attackBridgeKeyEchoed},
	}...)
}

func attackBridgeKeyEchoed(t *testing.T, m mode) {
	var kb [12]byte
	_, _ = rand.Read(kb[:])
	key := "sk-rljail-echo-" + hex.EncodeToString(kb[:])
	_, _ = rand.Read(kb[:])
	urlToken := "urltoken" + hex.EncodeToString(kb[:])
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var in struct {
			Messages []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		_ = json.Unmarshal(body, &in)
		prompt := ""
		if len(in.Messages) > 0 {
			prompt = in.Messages[0].Content
		}
		auth := strings.TrimPrefix(req.Header.Get("Authorization"), "Bearer ")
		switch prompt {
		case "deny":
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": "Incorrect API key provided: " + auth}})
		case "drop":
			if hj, ok := w.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					_ = c.(*net.TCPConn).SetLinger(0)
					_ = c.Close()
				}
			}
		default:
			_ = json.NewEncoder(w).Encode(map[string]any{"choices": []any{map[string]any{"message": map[string]any{"role": "assistant", "content": "you sent the key " + auth}}}})
		}
	}))
	defer srv.Close()
	s := startSessionEnv(t, m, []string{"RLJAIL_TEST_KEY=" + key}, "--llm", "openai",
		"--llm-endpoint", srv.URL+"/v1/chat/completions?token="+urlToken,
		"--llm-model", "m1", "--llm-key-env", "RLJAIL_TEST_KEY")
	rep := s.exec(t, `for p in ("deny", "drop", "echo"):
    try:
        print(p, "answer:", llm_query(p))
    except Exception as e:
        print(p, type(e).__name__, e)
try:
    print("batch", llm_query_batched(["echo", "deny"]))
except Exception as e:
    print("batch", type(e).__name__, e)`)
	s.close(t)
	b, _ := json.Marshal(rep)
	out := string(b)
	stdout, _ := rep["stdout"].(string)
	t.Logf("the cell saw: %s", stdout)
	if strings.Contains(out, key) {
		t.Errorf("the API key reached the jail through what the endpoint echoed: %s", stdout)
	}
	if strings.Contains(out, urlToken) {
		t.Errorf("the endpoint URL's query token reached the jail in a transport error: %s", stdout)
	}
	// The calls did reach the endpoint, and its words the cell.
	for _, want := range []string{"deny CallFailed", "401", "drop CallFailed", "echo answer: you sent the key ", "batch CallFailed"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the cell's output lacks %q: %s", want, stdout)
		}
	}
}
