package integration

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// callRunner is the test acting as a session's runner for the bridge
// (issue 20): it reads every line without an id (a call event), records
// it, and answers it with a call_result as answer says.
type callRunner struct {
	s      *sessionProc
	answer func(ev map[string]any) (value any, errMsg string, reply bool)

	mu     sync.Mutex
	events []map[string]any
	bad    []string // lines that were not JSON, or events that were not well-formed
	others []map[string]any
}

func runCalls(s *sessionProc, answer func(ev map[string]any) (any, string, bool)) *callRunner {
	r := &callRunner{s: s, answer: answer}
	go func() {
		for {
			var v map[string]any
			select {
			case v = <-s.other:
			case <-s.done:
				return
			}
			r.mu.Lock()
			if u, ok := v["unparsed"]; ok {
				r.bad = append(r.bad, fmt.Sprint(u))
				r.mu.Unlock()
				continue
			}
			if v["event"] != "call" {
				r.others = append(r.others, v)
				r.mu.Unlock()
				continue
			}
			_, okCall := v["call"].(float64)
			_, okCell := v["cell"].(float64)
			_, okName := v["name"].(string)
			_, okArgs := v["args"].(map[string]any)
			if !okCall || !okCell || !okName || !okArgs || len(v) != 5 {
				b, _ := json.Marshal(v)
				r.bad = append(r.bad, "malformed event "+string(b))
			}
			r.events = append(r.events, v)
			r.mu.Unlock()
			value, msg, ok := answer(v)
			if !ok {
				continue
			}
			res := map[string]any{"op": "call_result", "call": v["call"]}
			if msg != "" {
				res["error"] = msg
			} else {
				res["value"] = value
			}
			b, _ := json.Marshal(res)
			_, _ = s.in.Write(append(b, '\n'))
		}
	}()
	return r
}

func (r *callRunner) seen() (events []map[string]any, bad []string, others []map[string]any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]map[string]any(nil), r.events...), append([]string(nil), r.bad...), append([]map[string]any(nil), r.others...)
}

// prompts counts the model prompts among events.
func prompts(events []map[string]any) (llm, tools int) {
	for _, ev := range events {
		args := ev["args"].(map[string]any)
		switch ev["name"] {
		case "llm_query", "rlm_query":
			llm++
		case "llm_query_batched", "rlm_query_batched":
			ps, _ := args["prompts"].([]any)
			llm += len(ps)
		default:
			tools++
		}
	}
	return llm, tools
}

// callCounts is an exec reply's "calls".
func callCounts(t *testing.T, r map[string]any) map[string]int {
	t.Helper()
	c, ok := r["calls"].(map[string]any)
	if !ok {
		t.Fatalf("the exec reply has no calls: %v", r)
	}
	out := map[string]int{}
	for k, v := range c {
		f, _ := v.(float64)
		out[k] = int(f)
	}
	return out
}

// echoAnswer answers a model call with "re: " and each prompt, a tool
// with its arguments.
func echoAnswer(ev map[string]any) (any, string, bool) {
	args := ev["args"].(map[string]any)
	switch ev["name"] {
	case "llm_query", "rlm_query":
		return "re: " + fmt.Sprint(args["prompt"]), "", true
	case "llm_query_batched", "rlm_query_batched":
		var out []string
		for _, p := range args["prompts"].([]any) {
			out = append(out, "re: "+fmt.Sprint(p))
		}
		return out, "", true
	}
	return args, "", true
}

func init() {
	attackCases = append(attackCases, []attackCase{
		{name: "bridge_budget_race", group: groupDoS,
			mechanism: "16 threads of one cell call llm_query, llm_query_batched and a tool at once, to pass --max-llm-calls and --max-tool-calls between a check and a count (a billing attack)",
			layer:     "the bridge reserves each call's budget under one lock before it is answered; the runner, outside the jail, counts the events it got",
			run:       bridgeBudgetRace},
		{name: "bridge_hostile_calls", group: groupProcesses,
			mechanism: "a cell writes calls into the worker's channel itself: a name with a newline and a forged event, invalid UTF-8, an undeclared name, NUL and line separators in arguments, a 100 MiB argument, a 100 MiB line, to break the runner's JSON lines or reach a host function nobody declared",
			layer:     "the supervisor caps the line, checks every call (names, shapes, UTF-8) in bridge.Serve and re-encodes the arguments; the runner, outside the jail, sees only well-formed events of declared names",
			run:       bridgeHostileCalls},
		{name: "bridge_llm_key", group: groupSecrets,
			mechanism: "with --llm openai, a cell looks for the API key in its environment, /proc/self/environ, /proc/1/environ, every process's environ and every file of the jail, and connects to the model endpoint on the host's loopback itself",
			layer:     "the key is read from rljail's own environment and sent only in the supervisor's requests; the jail's environment is its allowlist and its network namespace is empty; the test's endpoint counts the requests it got",
			run:       bridgeLLMKey},
	}...)
}

// TestBridge drives the calls from a cell to the runner end to end, root
// and rootless.
func TestBridge(t *testing.T) {
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			t.Run("calls", func(t *testing.T) { bridgeCalls(t, m) })
			t.Run("slow_runner", func(t *testing.T) { bridgeSlowRunner(t, m) })
		})
	}
}

// bridgeCalls: llm_query, a batch, rlm_query and tools answered by the
// runner, a handler's error, hello's tools and limits, the counts and the
// audit log.
func bridgeCalls(t *testing.T, m mode) {
	dir := newOpenDir(t)
	audit := filepath.Join(dir, "audit.jsonl")
	s := startSession(t, m, "--tool", "search:query,k", "--tool", "now", "--audit-log", audit, "--audit-prompts")
	r := runCalls(s, func(ev map[string]any) (any, string, bool) {
		args := ev["args"].(map[string]any)
		switch ev["name"] {
		case "llm_query":
			if args["prompt"] == "fail" {
				return nil, "the model is down", true
			}
		case "now":
			return 42, "", true
		}
		return echoAnswer(ev)
	})
	h := s.do(t, map[string]any{"op": "hello"})
	lim, _ := h["limits"].(map[string]any)
	wantTools := []any{map[string]any{"name": "search", "params": []any{"query", "k"}}, map[string]any{"name": "now", "params": []any{}}}
	if !reflect.DeepEqual(h["tools"], wantTools) || lim["max_llm_calls"] != float64(50) || lim["llm"] != "client" || lim["call_timeout_ms"] != float64(120000) {
		t.Errorf("hello: tools %v, limits %v", h["tools"], lim)
	}
	rep := s.exec(t, `print(llm_query("hi"))
print(llm_query_batched(["a", "b"]))
print(rlm_query("deep", model="child"))
print(search("x", k=3)["k"], search(query="y", k=1)["query"], now())
try:
    llm_query("fail")
except CallFailed as e:
    print("failed:", e)
`)
	want := "re: hi\n['re: a', 're: b']\nre: deep\n3 y 42\nfailed: the model is down\n"
	if rep["stdout"] != want || rep["error"] != nil {
		t.Fatalf("the cell's calls: stdout %q, error %v; want %q", rep["stdout"], rep["error"], want)
	}
	if c := callCounts(t, rep); c["llm_calls"] != 5 || c["tool_calls"] != 3 || c["refused"] != 1 || c["prompt_chars"] != 12 {
		t.Errorf("counts %v, want 5 model calls (a batch's prompts each), 3 tool calls, 1 refused (the handler's error), 12 prompt characters", c)
	}
	if rep := s.exec(t, `print(llm_query("again"))`); rep["stdout"] != "re: again\n" {
		t.Errorf("a call after the handler's error: %v", rep)
	}
	events, bad, others := r.seen()
	var names []string
	last := 0.0
	for _, ev := range events {
		names = append(names, ev["name"].(string))
		if n := ev["call"].(float64); n <= last {
			t.Errorf("event numbers not increasing: %v", events)
		} else {
			last = n
		}
	}
	if got := strings.Join(names, " "); got != "llm_query llm_query_batched rlm_query search search now llm_query llm_query" || len(bad) > 0 || len(others) > 0 {
		t.Errorf("the runner got %q, bad lines %v, other lines %v", got, bad, others)
	}
	if ev := events[2]; ev["cell"] != rep["cell"] || !reflect.DeepEqual(ev["args"], map[string]any{"prompt": "deep", "model": "child"}) {
		t.Errorf("rlm_query's event: %v", ev)
	}
	s.close(t)
	b, _ := os.ReadFile(audit)
	var calls, cellAt, firstCall int
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("audit line %d: %v", i, err)
		}
		if rec["kind"] == "call" {
			calls++
			if calls == 1 {
				firstCall = i
				if rec["session_id"] != h["session_id"] || !reflect.DeepEqual(rec["prompts"], []any{"hi"}) || rec["outcome"] != "ok" || len(rec["prompt_sha256"].([]any)) != 1 {
					t.Errorf("the first call's record: %s", line)
				}
			}
			if strings.Contains(line, `"prompts":["fail"]`) && rec["outcome"] != "CallFailed" {
				t.Errorf("the failed call's record: %s", line)
			}
		} else if rec["cell"] == float64(1) {
			cellAt = i
		}
	}
	if calls != 8 || firstCall > cellAt {
		t.Errorf("the audit log has %d call records (want 8), the first at line %d, the cell's at %d (calls first): %s", calls, firstCall, cellAt, b)
	}
}

// bridgeSlowRunner: a runner that never answers while the cell times out:
// CellTimeout, the next cell works, the late call_result is UnknownCall.
func bridgeSlowRunner(t *testing.T, m mode) {
	s := startSession(t, m, "--cell-timeout", "1s")
	r := runCalls(s, func(map[string]any) (any, string, bool) { return nil, "", false })
	start := time.Now()
	rep := s.exec(t, `llm_query("slow")`)
	if errType(rep) != "CellTimeout" || time.Since(start) > 10*time.Second {
		t.Fatalf("a call the runner does not answer: %v after %v, want CellTimeout", rep, time.Since(start))
	}
	if rep := s.exec(t, `print("next")`); rep["stdout"] != "next\n" || rep["error"] != nil {
		t.Errorf("the cell after the timeout: %v", rep)
	}
	events, _, _ := r.seen()
	if len(events) != 1 {
		t.Fatalf("events %v, want the one call", events)
	}
	late := s.do(t, map[string]any{"op": "call_result", "call": events[0]["call"], "value": "late"})
	if errType(late) != "UnknownCall" {
		t.Errorf("the late call_result: %v, want UnknownCall", late)
	}
	// Without an id, no reply: the next request's is the next line.
	_, _ = s.in.Write([]byte(fmt.Sprintf(`{"op":"call_result","call":%v,"error":"late"}`+"\n", events[0]["call"])))
	if rep := s.exec(t, `print(1)`); rep["stdout"] != "1\n" {
		t.Errorf("after an id-less call_result: %v", rep)
	}
	if _, bad, others := r.seen(); len(bad)+len(others) > 0 {
		t.Errorf("lines without an id: %v %v", bad, others)
	}
	s.close(t)

	// --call-timeout: the call ends before the cell does, and the cell
	// may catch it.
	s = startSession(t, m, "--call-timeout", "300ms")
	runCalls(s, func(map[string]any) (any, string, bool) { return nil, "", false })
	rep = s.exec(t, `try:
    llm_query("slow")
except CallTimeout as e:
    print("CallTimeout:", e)`)
	if !strings.HasPrefix(fmt.Sprint(rep["stdout"]), "CallTimeout: llm_query got no answer within 300ms") || callCounts(t, rep)["refused"] != 1 {
		t.Errorf("a call past --call-timeout: %v", rep)
	}
	s.close(t)
}

// bridgeBudgetRace: decided from the runner's side (the events it got)
// and the supervisor's counts.
func bridgeBudgetRace(t *testing.T, m mode) {
	s := startSession(t, m, "--max-llm-calls", "10", "--max-tool-calls", "5", "--tool", "probe:i")
	r := runCalls(s, echoAnswer)
	rep := s.exec(t, `import threading
res = {"ok": 0, "llm": 0, "tool": 0, "tool_ok": 0}
lock = threading.Lock()
go = threading.Event()
def hammer(i):
    go.wait()
    for j in range(4):
        try:
            if j % 2:
                llm_query_batched(["p", "q"])
            else:
                llm_query("p")
            with lock: res["ok"] += 1
        except LLMBudgetExceeded:
            with lock: res["llm"] += 1
        try:
            probe(i)
            with lock: res["tool_ok"] += 1
        except ToolBudgetExceeded:
            with lock: res["tool"] += 1
ts = [threading.Thread(target=hammer, args=(i,)) for i in range(16)]
[t.start() for t in ts]
go.set()
[t.join() for t in ts]
print(res)`)
	if rep["error"] != nil {
		t.Fatalf("the racing cell: %v", rep)
	}
	events, bad, _ := r.seen()
	llm, tools := prompts(events)
	c := callCounts(t, rep)
	if llm > 10 || tools > 5 || c["llm_calls"] > 10 || c["tool_calls"] > 5 || len(bad) > 0 {
		t.Errorf("past the budget: the runner got %d model prompts (budget 10) and %d tool calls (budget 5); the supervisor counts %v; bad lines %v", llm, tools, c, bad)
	}
	if llm != c["llm_calls"] || tools != c["tool_calls"] || llm < 9 || tools != 5 {
		t.Errorf("the runner got %d prompts and %d tool calls, the supervisor counts %v: want the budgets spent, the same on both sides", llm, tools, c)
	}
	t.Logf("the cell saw %v", rep["stdout"])
	s.close(t)
}

// bridgeHostileCalls: calls written into the channel by the cell itself.
func bridgeHostileCalls(t *testing.T, m mode) {
	s := startSession(t, m, "--tool", "probe:i", "--memory", "1g")
	r := runCalls(s, echoAnswer)
	rep := s.exec(t, `import os
def raw(line):
    view = memoryview(line + b"\n")
    while view:
        view = view[os.write(3, view):]
raw(b'{"c":"call","n":1000000001,"name":"x\\n{\\"event\\":\\"call\\",\\"call\\":1}","args":{}}')
raw(b'{"c":"call","n":1000000002,"name":"llm_query","args":{"prompt":"\xff\xfe"}}')
raw(b'{"c":"call","n":1000000003,"name":"probe\xff","args":{"i":1}}')
raw(b'{"c":"call","n":1000000004,"name":"os_system","args":{"cmd":"id"}}')
raw(b'{"c":"call","n":1000000005,"name":"probe","args":{"i":"\\u2028\\n\\r\\u0000}\\"x"}}')
raw(b'{"c":"result","n":1,"value":"self-answered"}')
try:
    probe("x" * (100 << 20))
except BadCall as e:
    print("100 MiB refused")
print(llm_query("still"))
`)
	if rep["stdout"] != "100 MiB refused\nre: still\n" || rep["error"] != nil {
		t.Errorf("the hostile cell: %v", rep)
	}
	c := callCounts(t, rep)
	if c["refused"] < 4 || c["tool_calls"] != 1 {
		t.Errorf("counts %v: want the bad name, the invalid UTF-8 and the undeclared name refused, one tool call", c)
	}
	// A 100 MiB line is over the channel's cap: the session is lost, the
	// runner sees nothing of it.
	rep = s.exec(t, `import os
line = b'{"c":"call","n":7,"name":"probe","args":{"i":"' + b"y" * (100 << 20) + b'"}}\n'
view = memoryview(line)
while view:
    view = view[os.write(3, view):]
import time; time.sleep(5)`)
	if errType(rep) != "SessionLost" || errReason(rep) != "worker_protocol" {
		t.Errorf("a 100 MiB line: %v, want SessionLost worker_protocol", rep)
	}
	events, bad, _ := r.seen()
	var names []string
	for _, ev := range events {
		names = append(names, ev["name"].(string))
	}
	if strings.Join(names, " ") != "probe llm_query" || len(bad) > 0 {
		t.Fatalf("the runner got %q (want probe llm_query), bad lines %v", names, bad)
	}
	if got := events[0]["args"].(map[string]any)["i"]; got != "\u2028\n\r\x00}\"x" {
		t.Errorf("the tool's argument %q, want it intact (escaped on the line)", got)
	}
	s.close(t)
}

// bridgeLLMKey: --llm openai against an endpoint on the host's loopback.
func bridgeLLMKey(t *testing.T, m mode) {
	var kb [12]byte
	_, _ = rand.Read(kb[:])
	key := "sk-rljail-test-" + hex.EncodeToString(kb[:])
	var mu sync.Mutex
	var auths, models []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var in struct {
			Model    string `json:"model"`
			Messages []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		_ = json.Unmarshal(body, &in)
		mu.Lock()
		auths = append(auths, req.Header.Get("Authorization"))
		models = append(models, in.Model)
		mu.Unlock()
		text := "model: "
		if len(in.Messages) > 0 {
			text += in.Messages[0].Content
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"choices": []any{map[string]any{"message": map[string]any{"role": "assistant", "content": text}}}})
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	dir := newOpenDir(t)
	report, audit := filepath.Join(dir, "report.json"), filepath.Join(dir, "audit.jsonl")
	s := startSessionEnv(t, m, []string{"RLJAIL_TEST_KEY=" + key}, "--llm", "openai", "--llm-endpoint", srv.URL+"/v1",
		"--llm-model", "m1", "--llm-key-env", "RLJAIL_TEST_KEY", "--tool", "lookup:k", "--result", report, "--audit-log", audit)
	r := runCalls(s, func(ev map[string]any) (any, string, bool) {
		return "tool: " + fmt.Sprint(ev["args"].(map[string]any)["k"]), "", true
	})
	var out strings.Builder
	rep := s.exec(t, `print(llm_query("hello"))
print(llm_query_batched(["a", "b", "c"], model="m2"))
print(lookup("k"))`)
	b, _ := json.Marshal(rep)
	out.Write(b)
	if rep["stdout"] != "model: hello\n['model: a', 'model: b', 'model: c']\ntool: k\n" {
		t.Errorf("the cell's calls through the endpoint: %v", rep)
	}
	rep = s.exec(t, fmt.Sprintf(`import os, socket
PREFIX = ("sk-rljail-" + "test-").encode()
hits = []
def check(where, data):
    if isinstance(data, str):
        data = data.encode("utf-8", "replace")
    i = data.find(PREFIX)
    if i >= 0:
        hits.append(where)
check("os.environ", repr(dict(os.environ)))
for p in ("/proc/self/environ", "/proc/1/environ", "/proc/self/cmdline", "/proc/1/cmdline"):
    try:
        check(p, open(p, "rb").read())
    except OSError as e:
        print("unreadable", p, e.errno)
for pid in os.listdir("/proc"):
    if pid.isdigit():
        for f in ("environ", "cmdline"):
            try:
                check("/proc/%%s/%%s" %% (pid, f), open("/proc/%%s/%%s" %% (pid, f), "rb").read())
            except OSError:
                pass
n = 0
for root, dirs, files in os.walk("/"):
    if root in ("/proc", "/sys", "/dev"):
        dirs[:] = []
        continue
    for f in files:
        path = os.path.join(root, f)
        try:
            if os.path.islink(path) or os.path.getsize(path) > (1 << 20):
                continue
            with open(path, "rb") as fh:
                check(path, fh.read())
            n += 1
        except OSError:
            pass
print("files read", n, "hits", hits)
try:
    socket.create_connection(("127.0.0.1", %s), timeout=2)
    print("CONNECTED")
except OSError as e:
    print("connect failed:", e)
`, u.Port()))
	b, _ = json.Marshal(rep)
	out.Write(b)
	stdout, _ := rep["stdout"].(string)
	t.Logf("the cell's search: %s", stdout)
	if !strings.Contains(stdout, "hits []") || !strings.Contains(stdout, "connect failed") || strings.Contains(stdout, "files read 0 ") {
		t.Errorf("the cell's search: %v", rep)
	}
	s.close(t)
	mu.Lock()
	defer mu.Unlock()
	if len(auths) != 4 {
		t.Errorf("the endpoint got %d requests, want the bridge's 4 only", len(auths))
	}
	for i, a := range auths {
		if a != "Bearer "+key || (i == 0 && models[i] != "m1") || (i > 0 && models[i] != "m2") {
			t.Errorf("request %d: Authorization %q, model %q", i, a, models[i])
		}
	}
	events, bad, _ := r.seen()
	if len(events) != 1 || events[0]["name"] != "lookup" || len(bad) > 0 {
		t.Errorf("the runner got %v (want the tool call only), bad lines %v", events, bad)
	}
	rb, _ := os.ReadFile(report)
	ab, _ := os.ReadFile(audit)
	for what, text := range map[string]string{"the replies": out.String(), "rljail's stderr": s.stderr.String(), "the report": string(rb), "the audit log": string(ab)} {
		if strings.Contains(text, key) || strings.Contains(text, "sk-rljail-test-") {
			t.Errorf("the key is in %s", what)
		}
	}
	if len(rb) == 0 {
		t.Errorf("no report")
	}
}
