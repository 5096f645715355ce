package integration

// Red-team round 8: the one-shot CLI and sessions, as the code in the
// jail and as a careless user. Every case decides from the host: the
// files rljail writes there, its exit status and stderr, what is left.

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

func init() {
	attackCases = append(attackCases, []attackCase{
		{name: "session_audit_refused_flood", group: groupDoS,
			mechanism: "a session with --audit-log: a cell calls llm_query in a loop from four threads with a prompt over --max-llm-prompt-chars (any refused call does: a spent budget, an undeclared tool), for 3 s; every refusal was one line of rljail's audit log on the host, about 4 MB a second for as long as the session lasts (a 30-minute session, 7 GB of the host's disk)",
			layer:     "session.calls: the audit log records at most 64 refused calls of a cell; the cell's own record counts the rest (calls_unrecorded); a call the bridge takes is always recorded (budgets bound those)",
			run:       attackSessionAuditRefusedFlood},
	}...)
}

func attackSessionAuditRefusedFlood(t *testing.T, m mode) {
	audit := filepath.Join(newOpenDir(t), "audit.jsonl")
	s := startSession(t, m, "--audit-log", audit, "--max-llm-prompt-chars", "1", "--cell-timeout", "20s")
	rep := s.exec(t, `import threading, time
def spin():
    end = time.time() + 3
    while time.time() < end:
        try:
            llm_query("xx")
        except LLMBudgetExceeded:
            pass
ts = [threading.Thread(target=spin) for _ in range(4)]
for x in ts: x.start()
for x in ts: x.join()
print("done")`)
	s.close(t)
	if rep["stdout"] != "done\n" {
		t.Fatalf("the flooding cell did not finish: %.500v", rep)
	}
	refused := callCounts(t, rep)["refused"]
	st, err := os.Stat(audit)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(audit)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var callLines int
	var unrecorded float64 = -1
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("an audit line does not read: %v", err)
		}
		if rec["kind"] == "call" {
			callLines++
		} else if rec["cell"] == float64(1) {
			unrecorded, _ = rec["calls_unrecorded"].(float64)
		}
	}
	t.Logf("%d calls refused; the audit log: %d bytes, %d call records, calls_unrecorded %v", refused, st.Size(), callLines, unrecorded)
	if refused < 1000 {
		t.Fatalf("only %d calls were refused in 3 s: the flood did not happen", refused)
	}
	if st.Size() > 256<<10 || callLines > 64 {
		t.Errorf("one cell's refused calls wrote %d bytes (%d call records) to the host's audit log, over the 64 records a cell's refusals may write", st.Size(), callLines)
	}
	if int(unrecorded)+callLines != refused {
		t.Errorf("the cell's audit record says %v calls unrecorded, %d are recorded, of %d refused: they must add up", unrecorded, callLines, refused)
	}
}
