package integration

// Red-team round 5 (issue 29): what a session's supervisor spends and
// says on the jail's behalf. Every case decides from the host: the
// supervisor's peak resident memory read from /proc, the bytes rljail
// wrote on the session's stdout (a secret there reached the jail or the
// runner; a line's length as written), the call events the runner was
// sent, the audit log rljail wrote.

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func init() {
	attackCases = append(attackCases, []attackCase{
		{name: "session_call_memory", group: groupDoS, serial: true,
			mechanism: "a cell writes 64 call lines of 15 MiB and 16 batches of 7 MiB straight to its channel (descriptor 3) while the runner answers none: the supervisor held each call's arguments, decoded more than once, until the call timeout (2.45 GiB of host memory that no cgroup of the jail's is charged for) and sent the runner every one as a call event",
			layer:     "session.calls: a call line over 8 MiB is refused as it is read, and the calls in flight hold at most 32 MiB (their lines, then their results); the reader reuses one buffer; the supervisor's peak RSS, read from /proc, stays under 256 MiB",
			run:       attackSessionCallMemory},
		{name: "bridge_key_fragment_cut", group: groupSecrets,
			mechanism: "with --llm openai, an endpoint whose error echoes the model the cell chose (up to 200 characters) and then the key: the error was cut to 300 characters before the key was redacted, so the cut split the key and its first part reached the cell; the cell tries every model length",
			layer:     "bridge.Redactor: every run of 8 or more of the key's characters is redacted, before any cut, in answers, errors and the audit log",
			run:       attackBridgeKeyFragmentCut},
		{name: "session_reply_field_caps", group: groupDoS,
			mechanism: "raise Exception('<' * 60000) under --max-output-chars 10000 (a 720 KB reply line: the message uncapped, each '<' six bytes of JSON), and a cell that forges its own worker reply carrying a 15 MiB message, traceback and type",
			layer:     "session.workerError holds message and traceback to the output cap (head and tail) and the type to 200 bytes; replies are encoded without HTML escaping",
			run:       attackSessionReplyFieldCaps},
		{name: "session_claimed_verdicts", group: groupProcesses,
			mechanism: "a cell raises exception classes of its own named after every type only the supervisor gives (CellLimit, Busy, BadPath, FileTooLarge, RequestTooLarge, UnknownCall, BadRequest, ...), in exec and from a __repr__ that get runs, so that the runner counts a spent budget or a refused request that never was",
			layer:     "protocol 2: every error carries origin, rljail or cell, set by the supervisor; a supervisor type the worker claims becomes the supervisor's WorkerError saying what was claimed",
			run:       attackSessionClaimedVerdicts},
		{name: "bridge_empty_batch_forwarded", group: groupDoS,
			mechanism: "with --max-llm-calls 1, after LLMBudgetExceeded, a cell sends 200 llm_query_batched([]) calls (written to its channel itself, past the worker, which answers an empty batch with [] on its own): an empty batch costs no budget and each reached the runner as a call event",
			layer:     "bridge.check refuses an empty batch with BadCall; no call the budget or the checks refuse is forwarded",
			run:       attackBridgeEmptyBatch},
	}...)
}

func attackSessionCallMemory(t *testing.T, m mode) {
	s := startSession(t, m, "--memory", "512m", "--cell-timeout", "60s", "--call-timeout", "20s", "--max-llm-calls", "10000")
	// The runner reads every event and answers none; it counts what it
	// was sent.
	var eventBytes, events int64
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case v := <-s.other:
				if v["event"] == "call" {
					b, _ := json.Marshal(v)
					eventBytes += int64(len(b))
					events++
				}
			case <-stop:
				return
			case <-s.done:
				return
			}
		}
	}()
	// Batches of prompts within --max-llm-prompt-chars: each call is
	// one the bridge would take, 15 MiB and 7 MiB of JSON.
	_, ch := s.send(t, map[string]any{"op": "exec", "code": `import os, time
prompt = b'"' + b"b" * ((1 << 20) - 16) + b'"'
def batch(k):
    return b'{"c":"call","n":0,"name":"llm_query_batched","args":{"prompts":[' + b",".join([prompt] * k) + b'],"model":null}}\n'
big = batch(15)
for n in range(1, 65):
    os.write(3, big.replace(b'"n":0,', b'"n":%d,' % (1000 + n), 1))
mid = batch(7)
for n in range(1, 17):
    os.write(3, mid.replace(b'"n":0,', b'"n":%d,' % (2000 + n), 1))
time.sleep(3)
print("flooded")`})
	rep := s.wait(t, ch, 150*time.Second)
	kb, ok := vmHWM(s.cmd.Process.Pid, filepath.Base(testBin))
	if !ok {
		t.Fatalf("no peak RSS of the session's supervisor (pid %d)", s.cmd.Process.Pid)
	}
	peak := kb << 10
	t.Logf("the supervisor's peak RSS: %.1f MiB; the runner was sent %d events, %.1f MiB; the exec: %v",
		float64(peak)/(1<<20), events, float64(eventBytes)/(1<<20), rep["calls"])
	if rep["stdout"] != "flooded\n" {
		t.Errorf("the flooding cell did not finish: %v", rep)
	}
	if peak > 256<<20 {
		t.Errorf("the supervisor's peak RSS reached %.1f MiB for a cell's calls, over the 256 MiB bound (SECURITY.md)", float64(peak)/(1<<20))
	}
	if eventBytes > 40<<20 {
		t.Errorf("the runner was sent %.1f MiB of call events for calls waiting at once, over the 32 MiB the calls in flight may hold", float64(eventBytes)/(1<<20))
	}
	if c := callCounts(t, rep); c["refused"] < 70 {
		t.Errorf("the exec's counts: %v refused, want the calls over the caps (at least 70 of 80) counted as refused", c)
	}
	if rep = s.exec(t, "print('alive')"); rep["stdout"] != "alive\n" {
		t.Errorf("the session after the flood: %v", rep)
	}
	s.close(t)
}

func attackBridgeKeyFragmentCut(t *testing.T, m mode) {
	var kb [48]byte
	_, _ = rand.Read(kb[:])
	key := "sk-rljail-frag-" + hex.EncodeToString(kb[:]) // 111 characters
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var in struct {
			Model string `json:"model"`
		}
		_ = json.Unmarshal(body, &in)
		auth := strings.TrimPrefix(req.Header.Get("Authorization"), "Bearer ")
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
			"message": "The model `" + in.Model + "` does not exist or you do not have access to it with key " + auth}})
	}))
	defer srv.Close()
	audit := filepath.Join(newOpenDir(t), "audit.jsonl")
	s := startSessionEnv(t, m, []string{"RLJAIL_TEST_KEY=" + key}, "--llm", "openai",
		"--llm-endpoint", srv.URL+"/v1", "--llm-model", "m1", "--llm-key-env", "RLJAIL_TEST_KEY",
		"--max-llm-calls", "300", "--audit-log", audit)
	rep := s.exec(t, `for n in range(0, 201, 3):
    try:
        llm_query("x", model="m" * n)
    except Exception as e:
        print(n, type(e).__name__, e)`)
	s.close(t)
	b, _ := json.Marshal(rep)
	logged, _ := os.ReadFile(audit)
	stdout, _ := rep["stdout"].(string)
	if !strings.Contains(stdout, "CallFailed") || !strings.Contains(stdout, "does not exist") {
		t.Fatalf("the calls did not reach the endpoint's error: %.500s", stdout)
	}
	for where, text := range map[string]string{"the session's stdout": string(b), "the audit log": string(logged)} {
		if frag := keyFragment(key, text, 8); frag != "" {
			t.Errorf("%d characters of the key (%q) reached %s", len(frag), frag, where)
		}
	}
}

// keyFragment is the longest run of at least n characters of key that
// text holds, or "".
func keyFragment(key, text string, n int) string {
	best := ""
	for i := 0; i+n <= len(key); i++ {
		for j := len(key); j-i >= n && j-i > len(best); j-- {
			if strings.Contains(text, key[i:j]) {
				best = key[i:j]
				break
			}
		}
	}
	return best
}

func attackSessionReplyFieldCaps(t *testing.T, m mode) {
	s := startSession(t, m, "--max-output-chars", "10000")
	rep := s.exec(t, "raise Exception('<' * 60000)")
	if n := s.maxLine.Load(); n > 32<<10 {
		t.Errorf("the reply to an exception of 60,000 '<' under --max-output-chars 10000 was a line of %d bytes", n)
	}
	if e, _ := rep["error"].(map[string]any); e == nil || !strings.HasPrefix(fmt.Sprint(e["message"]), "<<<") {
		t.Errorf("the exception's reply: %.300v", rep)
	}
	// A reply of the cell's own: it finds the token of the request in
	// flight in the worker's frames and writes its reply to descriptor 3.
	rep = s.exec(t, `import sys, os, json
f = sys._getframe()
token = None
while f is not None:
    if "token" in f.f_locals and isinstance(f.f_locals.get("token"), str):
        token = f.f_locals["token"]
    f = f.f_back
big = "<" * (5 << 20)
os.write(3, (json.dumps({"t": token, "ok": True, "names": [], "error": {"type": big, "message": big, "traceback": big}}) + "\n").encode())
import time
time.sleep(1)`)
	if n := s.maxLine.Load(); n > 64<<10 {
		t.Errorf("a forged worker reply with 15 MiB of text made a reply line of %d bytes", n)
	}
	if e, _ := rep["error"].(map[string]any); e == nil || e["origin"] != "cell" {
		t.Errorf("the forged reply: %.300v, want the cell's error (origin cell), capped", rep)
	}
	if rep = s.exec(t, "print('alive')"); rep["stdout"] != "alive\n" {
		t.Errorf("the session after the forged reply: %v", rep)
	}
	s.close(t)
}

func attackSessionClaimedVerdicts(t *testing.T, m mode) {
	s := startSession(t, m, "--max-cells", "40")
	names := []string{"BadRequest", "RequestTooLarge", "UnknownOp", "Busy", "CellTimeout", "CellLimit",
		"SessionLost", "BadPath", "FileTooLarge", "WorkerError", "UnknownCall"}
	supervisors := map[string]bool{}
	for _, n := range names {
		supervisors[n] = true
	}
	judge := func(what, claimed string, rep map[string]any) {
		e, _ := rep["error"].(map[string]any)
		typ, _ := e["type"].(string)
		origin, _ := e["origin"].(string)
		switch {
		case e == nil:
			t.Errorf("%s claiming %s: no error: %v", what, claimed, rep)
		case origin != "rljail" && origin != "cell":
			t.Errorf("%s claiming %s: error %q without an origin a runner can tell by: %v", what, claimed, typ, e)
		case supervisors[typ] && (origin != "rljail" || typ != "WorkerError"):
			t.Errorf("%s claiming %s reads as the supervisor's %s (origin %q): %v", what, claimed, typ, origin, e)
		case typ == claimed && claimed != "WorkerError":
			t.Errorf("%s: the cell's claim %s reached the runner as that type: %v", what, claimed, e)
		}
	}
	for _, n := range names {
		judge("exec", n, s.exec(t, fmt.Sprintf("class %s(Exception): pass\nraise %s('the session\\'s budget of 100 cells is spent')", n, n)))
		s.exec(t, fmt.Sprintf("class %s(Exception): pass\nclass X:\n    def __repr__(self):\n        raise %s('refused')\nx = X()", n, n))
		judge("get", n, s.do(t, map[string]any{"op": "get", "name": "x"}))
	}
	// The supervisor's own verdicts read as its own.
	rep := s.do(t, map[string]any{"op": "get", "name": "no such"})
	if e, _ := rep["error"].(map[string]any); e["type"] != "BadRequest" || e["origin"] != "rljail" {
		t.Errorf("get of a bad name: %v, want BadRequest from rljail", rep)
	}
	rep = s.do(t, map[string]any{"op": "get", "name": "nosuchname"})
	if e, _ := rep["error"].(map[string]any); e["type"] != "KeyError" || e["origin"] != "cell" {
		t.Errorf("get of an unknown name: %v, want the worker's KeyError (origin cell)", rep)
	}
	s.close(t)
}

func attackBridgeEmptyBatch(t *testing.T, m mode) {
	s := startSession(t, m, "--max-llm-calls", "1")
	r := runCalls(s, echoAnswer)
	// The worker answers an empty batch itself ([], as rlm's LocalREPL
	// does); a cell that writes its own call lines to the channel sends
	// the supervisor the empty batches.
	rep := s.exec(t, `import os, time
print(llm_query("first"))
try:
    llm_query("second")
except LLMBudgetExceeded as e:
    print("budget", e)
try:
    print("batch", llm_query_batched([], model="m"))
except Exception as e:
    print("batch", type(e).__name__)
for n in range(200):
    os.write(3, b'{"c":"call","n":%d,"name":"llm_query_batched","args":{"prompts":[],"model":"m"}}\n' % (5000 + n))
time.sleep(1)`)
	time.Sleep(200 * time.Millisecond)
	events, _, _ := r.seen()
	if len(events) != 1 {
		t.Errorf("the runner was sent %d call events, want 1 (the one call within the budget): %.300v", len(events), rep)
	}
	if c := callCounts(t, rep); c["refused"] < 201 {
		t.Errorf("the exec's counts: %v, want the 200 empty batches and the second call refused", c)
	}
	s.close(t)
}
