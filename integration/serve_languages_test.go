package integration

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The languages of `rljail serve` (docs/api.md, "Languages") on the rootfs
// `make lang-rootfs` builds beside the Python one (bash, node, gcc), through
// /run_code as verl's sandbox_fusion reward sends it, /api/v2/execute as
// Piston's clients send it, and /v1/run.

// langRootfs is the directory of the language rootfs NAME, beside the Python one;
// a missing one fails the test (make lang-rootfs builds it).
func langRootfs(t *testing.T, name string) string {
	t.Helper()
	dir := filepath.Join(filepath.Dir(rootfsDir), name)
	if _, err := os.Stat(filepath.Join(dir, "usr")); err != nil {
		t.Fatalf("the %s rootfs is not built at %s (make lang-rootfs): %v", name, dir, err)
	}
	// The build's promise, seen from the host: no set-id bit and nothing but
	// files, directories and links, whatever the packages shipped.
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if m := fi.Mode(); m&(fs.ModeSetuid|fs.ModeSetgid) != 0 || m&(fs.ModeDevice|fs.ModeNamedPipe|fs.ModeSocket|fs.ModeCharDevice) != 0 {
			return fmt.Errorf("%s is %v", p, m)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the %s rootfs: %v", name, err)
	}
	return dir
}

func langConfig(t *testing.T) string {
	return fmt.Sprintf(`
[languages.bash]
rootfs = %q
file = "main.sh"
run = ["bash", "{file}"]
version = "5.2.15"

[languages.nodejs]
rootfs = %q
file = "main.js"
run = ["node", "{file}"]
version = "20.0.0"
memory = "1g"
aliases = ["javascript", "js", "node"]

[languages.cpp]
rootfs = %q
file = "main.cpp"
compile = ["g++", "-O2", "-o", "{out}", "{file}"]
run = ["{out}"]
version = "12.2.0"
aliases = ["c++", "g++"]
`, langRootfs(t, "bash"), langRootfs(t, "node"), langRootfs(t, "gcc"))
}

// verlResult is verl's classification of one SandboxFusion answer
// (verl/utils/reward_score/sandbox_fusion/utils.py, _process_single_case),
// written here from its rules: true or false for a finished run whose output
// matches or not, -1 a sandbox or API error, -2 a runtime error, -3 a run
// timeout, -4 a compile error or compile timeout.
func verlResult(code int, resp map[string]any, expected string) any {
	if code != 200 {
		return -1 // raise_for_status
	}
	stage := func(k string) map[string]any { m, _ := resp[k].(map[string]any); return m }
	cr, rr := stage("compile_result"), stage("run_result")
	switch resp["status"] {
	case "SandboxError":
		return -1
	case "Failed":
		if cr != nil && (cr["status"] == "Error" || cr["status"] == "TimeLimitExceeded" || cr["status"] == "Finished" && cr["return_code"] != float64(0)) {
			return -4
		}
		if rr != nil {
			switch {
			case rr["status"] == "TimeLimitExceeded":
				return -3
			case rr["status"] == "Error" || rr["status"] == "Finished" && rr["return_code"] != float64(0):
				return -2
			}
		}
		return -1
	case "Success":
		if rr == nil || rr["status"] != "Finished" {
			return -1
		}
		out, _ := rr["stdout"].(string)
		return strings.TrimRight(out, "\n") == strings.TrimRight(expected, "\n")
	}
	return -1
}

const cppSum = "#include <iostream>\nint main(){long a,b; std::cin>>a>>b; std::cout<<a+b<<std::endl; return 0;}\n"

func TestServeLanguagesSandboxFusion(t *testing.T) {
	for _, m := range bothModes {
		t.Run(string(m), func(t *testing.T) {
			opts := serveOpts{maxConc: 2, config: langConfig(t)}
			if m == asRootless {
				opts.tcp, opts.insecure = true, true
			}
			s := startServer(t, m, opts)
			// verl's call_sandbox_api: this JSON, these headers, compile and run
			// timeout both the case's timeout.
			verl := func(code, stdin string, timeout int, lang string) (int, map[string]any, time.Duration) {
				b, _ := json.Marshal(map[string]any{"compile_timeout": timeout, "run_timeout": timeout, "code": code, "stdin": stdin,
					"language": lang, "files": map[string]any{}, "fetch_files": []string{}})
				start := time.Now()
				status, body, _ := s.do(t, "POST", "/run_code", string(b), map[string]string{"Content-Type": "application/json", "Accept": "application/json"})
				var out map[string]any
				if err := json.Unmarshal(body, &out); err != nil {
					t.Fatalf("/run_code answer is not JSON: %v: %s", err, body)
				}
				return status, out, time.Since(start)
			}
			for _, tc := range []struct {
				name, lang, code, stdin, expected string
				timeout                           int
				want                              any
			}{
				{"python stdin", "python", "a, b = map(int, input().split())\nprint(a + b)", "2 3\n", "5", 10, true},
				{"python wrong answer", "python", "print(4)", "", "5", 10, false},
				{"cpp stdin", "cpp", cppSum, "40 2\n", "42", 10, true},
				{"cpp wrong answer", "cpp", cppSum, "1 1\n", "3", 10, false},
				{"cpp compile error", "cpp", "int main( { return 0; }\n", "", "", 10, -4},
				{"cpp runtime error", "cpp", "int main(){ return 3; }\n", "", "", 10, -2},
				{"cpp timeout", "cpp", "int main(){ volatile unsigned long i=0; for(;;) i++; }\n", "", "", 2, -3},
				{"bash", "bash", "read a b; echo $((a*b))", "6 7\n", "42", 10, true},
				{"nodejs", "nodejs", "const [a,b]=require('fs').readFileSync(0,'utf8').trim().split(' ').map(Number); console.log(a-b)", "50 8\n", "42", 10, true},
				{"unserved language", "rust", "fn main(){}", "", "", 10, -1},
			} {
				status, resp, took := verl(tc.code, tc.stdin, tc.timeout, tc.lang)
				if got := verlResult(status, resp, tc.expected); got != tc.want {
					t.Errorf("%s: verl's result %v, want %v (HTTP %d): %v", tc.name, got, tc.want, status, resp)
				}
				if tc.name == "cpp timeout" && took > 15*time.Second {
					t.Errorf("cpp timeout: the answer took %v, the run_timeout is 2 s (compile 2 s)", took)
				}
				if tc.name == "cpp compile error" {
					if resp["run_result"] != nil {
						t.Errorf("cpp compile error: run_result %v, want null (nothing ran)", resp["run_result"])
					}
					if cr, _ := resp["compile_result"].(map[string]any); cr == nil || !strings.Contains(fmt.Sprint(cr["stderr"]), "error") {
						t.Errorf("cpp compile error: compile_result %v lacks the compiler's error", resp["compile_result"])
					}
				}
			}
			// A language SandboxFusion has not: its 422, as FastAPI answers.
			status, resp, _ := verl("x", "", 10, "brainfuck")
			if status != 422 || !strings.Contains(fmt.Sprint(resp["detail"]), "language") {
				t.Errorf("unknown language: HTTP %d %v, want 422 naming language", status, resp)
			}
		})
	}
}

func TestServeLanguagesPiston(t *testing.T) {
	s := startServer(t, asRoot, serveOpts{maxConc: 2, config: langConfig(t)})
	var runtimes []map[string]any
	code, body, _ := s.do(t, "GET", "/api/v2/runtimes", "", nil)
	if code != 200 || json.Unmarshal(body, &runtimes) != nil {
		t.Fatalf("runtimes: %d %s", code, body)
	}
	have := map[string]bool{}
	for _, r := range runtimes {
		have[fmt.Sprint(r["language"])] = true
	}
	for _, want := range []string{"python", "bash", "nodejs", "cpp"} {
		if !have[want] {
			t.Errorf("runtimes lack %s: %v", want, runtimes)
		}
	}
	type stage struct {
		Stdout, Stderr, Output string
		Code                   *int
		Status                 *string
	}
	type answer struct {
		Language, Version string
		Run               *stage
		Compile           *stage
	}
	exec := func(lang, version string, files []map[string]string, stdin string, args []string, extra map[string]any) (int, answer, string) {
		req := map[string]any{"language": lang, "version": version, "files": files, "stdin": stdin, "args": args}
		for k, v := range extra {
			req[k] = v
		}
		b, _ := json.Marshal(req)
		code, body, _ := s.do(t, "POST", "/api/v2/execute", string(b), nil)
		var a answer
		_ = json.Unmarshal(body, &a)
		return code, a, string(body)
	}
	for _, tc := range []struct {
		name, lang, version, file, content, stdin, want string
		args                                            []string
	}{
		{"bash args stdin", "bash", "*", "main.sh", "read x; echo \"$x $1 $2\"", "hello\n", "hello a b\n", []string{"a", "b"}},
		{"node alias", "javascript", "20.x", "index.js", "console.log(process.argv.slice(2).join('+'))", "", "1+2\n", []string{"1", "2"}},
		{"c++", "c++", "12", "main.cpp", "#include <iostream>\nint main(int c,char**v){std::string s; std::cin>>s; std::cout<<s<<c-1<<\"\\n\";}\n", "x", "x1\n", []string{"arg"}},
	} {
		code, a, body := exec(tc.lang, tc.version, []map[string]string{{"name": tc.file, "content": tc.content}}, tc.stdin, tc.args,
			map[string]any{"compile_timeout": 10000, "run_timeout": 3000, "compile_memory_limit": -1, "run_memory_limit": -1})
		if code != 200 || a.Run == nil || a.Run.Stdout != tc.want || a.Run.Code == nil || *a.Run.Code != 0 {
			t.Errorf("%s: %d %s, want run.stdout %q code 0", tc.name, code, body, tc.want)
		}
		if tc.lang == "c++" && (a.Compile == nil || a.Compile.Code == nil || *a.Compile.Code != 0) {
			t.Errorf("%s: compile stage %s, want code 0", tc.name, body)
		}
	}
	// A compile error: Piston's compile stage with its code, and no run.
	code, a, out := exec("cpp", "*", []map[string]string{{"name": "main.cpp", "content": "int main( {"}}, "", nil, nil)
	if code != 200 || a.Compile == nil || a.Compile.Code == nil || *a.Compile.Code == 0 || a.Run != nil || !strings.Contains(a.Compile.Stderr, "error") {
		t.Errorf("compile error: %d %s, want compile.code != 0 with the error and no run", code, out)
	}
	// compile_timeout is the compile stage's: a 1 ms one cannot compile.
	code, a, out = exec("cpp", "*", []map[string]string{{"name": "main.cpp", "content": cppSum}}, "", nil, map[string]any{"compile_timeout": 1})
	if code != 200 || a.Compile == nil || a.Compile.Status == nil || *a.Compile.Status != "TO" || a.Run != nil {
		t.Errorf("compile_timeout 1 ms: %d %s, want compile.status TO and no run", code, out)
	}
	// run_timeout is the run stage's, decided by the wall clock outside.
	start := time.Now()
	code, a, out = exec("cpp", "*", []map[string]string{{"name": "main.cpp", "content": "int main(){ volatile unsigned long i=0; for(;;) i++; }"}}, "", nil, map[string]any{"run_timeout": 1000})
	if code != 200 || a.Run == nil || a.Run.Status == nil || *a.Run.Status != "TO" || time.Since(start) > 20*time.Second {
		t.Errorf("run_timeout 1 s: %d %s after %v, want run.status TO", code, out, time.Since(start))
	}
	// An unknown runtime: Piston's 400 {"message": ...}.
	code, _, out = exec("cobol", "*", []map[string]string{{"name": "a", "content": "x"}}, "", nil, nil)
	if code != 400 || !strings.Contains(out, `"message":"cobol-* runtime is unknown"`) {
		t.Errorf("unknown language: %d %s, want 400 cobol-* runtime is unknown", code, out)
	}
}

func TestServeLanguagesV1(t *testing.T) {
	s := startServer(t, asRoot, serveOpts{maxConc: 2, config: langConfig(t)})
	type stream struct{ Text string }
	type answer struct {
		Result  map[string]any
		Stdout  stream
		Stderr  stream
		Compile *struct {
			Result map[string]any
			Stderr stream
		}
	}
	for _, tc := range []struct{ lang, code, stdin, want string }{
		{"bash", "echo bash $((2+3)); cat", "in", "bash 5\nin"},
		{"nodejs", "console.log('node', 6*7)", "", "node 42\n"},
		{"cpp", cppSum, "20 22", "42\n"},
	} {
		var a answer
		code := s.postJSON(t, "/v1/run", map[string]any{"language": tc.lang, "code": tc.code, "stdin": tc.stdin}, &a)
		if code != 200 || a.Stdout.Text != tc.want || a.Result["status"] != "ok" {
			t.Errorf("%s: %d %+v, want stdout %q status ok", tc.lang, code, a, tc.want)
		}
		if (tc.lang == "cpp") != (a.Compile != nil) {
			t.Errorf("%s: compile %+v: a compile stage only for cpp", tc.lang, a.Compile)
		}
	}
	status, body, _ := s.do(t, "POST", "/v1/run", `{"language":"cobol","code":"x"}`, nil)
	if status != 400 || !strings.Contains(string(body), `language \"cobol\" is not one this server runs`) {
		t.Errorf("unknown language: %d %s", status, body)
	}
}
