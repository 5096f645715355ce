package serve

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/rljail/rljail/jail"
	"golang.org/x/sys/unix"
)

// Piston's API v2 (engineer-man/piston, api/src/api/v2.js): GET
// /api/v2/runtimes and POST /api/v2/execute, its shapes and its 400
// {"message": ...} for a bad request. The languages are the configuration's (languages.go).

// PistonFile is one file of a Piston request.
type PistonFile struct {
	Name     string  `json:"name"`
	Content  *string `json:"content"`
	Encoding string  `json:"encoding"`
}

// PistonRequest is Piston's execute request. Times in ms, memory in bytes.
type PistonRequest struct {
	Language           *string      `json:"language"`
	Version            *string      `json:"version"`
	Files              []PistonFile `json:"files"`
	Stdin              string       `json:"stdin"`
	Args               []string     `json:"args"`
	CompileTimeout     *float64     `json:"compile_timeout"`
	RunTimeout         *float64     `json:"run_timeout"`
	CompileCPUTime     *float64     `json:"compile_cpu_time"`
	RunCPUTime         *float64     `json:"run_cpu_time"`
	CompileMemoryLimit *int64       `json:"compile_memory_limit"`
	RunMemoryLimit     *int64       `json:"run_memory_limit"`
}

// PistonStage is the result of Piston's compile or run stage.
type PistonStage struct {
	Stdout   string  `json:"stdout"`
	Stderr   string  `json:"stderr"`
	Output   string  `json:"output"`
	Code     *int    `json:"code"`
	Signal   *string `json:"signal"`
	Message  *string `json:"message"`
	Status   *string `json:"status"`
	CPUTime  int64   `json:"cpu_time"`
	WallTime int64   `json:"wall_time"`
	Memory   int64   `json:"memory"`
}

// PistonResponse is Piston's execute response; compile is left out for an
// interpreted language, as Piston does.
type PistonResponse struct {
	Language string       `json:"language"`
	Version  string       `json:"version"`
	Run      PistonStage  `json:"run"`
	Compile  *PistonStage `json:"compile,omitempty"`
}

// PistonRuntime is one entry of GET /api/v2/runtimes.
type PistonRuntime struct {
	Language string   `json:"language"`
	Version  string   `json:"version"`
	Aliases  []string `json:"aliases"`
	Runtime  string   `json:"runtime,omitempty"`
}

var pistonPythonAliases = []string{"py", "py3", "python3", "python"}

func pistonMessage(w http.ResponseWriter, code int, format string, a ...any) {
	writeJSON(w, code, map[string]string{"message": fmt.Sprintf(format, a...)})
}

func (s *Server) handleRuntimes(w http.ResponseWriter, r *http.Request) {
	out := []PistonRuntime{}
	for _, name := range s.pythonRootfs() {
		if rt := s.opts.Runtimes[name]; rt != nil {
			out = append(out, PistonRuntime{Language: "python", Version: rt.PythonVersion, Aliases: pistonPythonAliases, Runtime: name})
		}
	}
	out = append(out, s.languageRuntimes()...)
	writeJSON(w, 200, out)
}

// pistonVersionMatches is Piston's version match for the forms its
// clients send: "*", an exact version, or a prefix with x or * for the
// rest ("3", "3.x", "3.11.x").
func pistonVersionMatches(want, have string) bool {
	if want == "*" || want == "x" || want == have {
		return true
	}
	w, h := strings.Split(want, "."), strings.Split(have, ".")
	if len(w) > len(h) {
		return false
	}
	for i, part := range w {
		if part == "x" || part == "*" {
			return true
		}
		if part != h[i] {
			return false
		}
	}
	return true
}

func (s *Server) handleExecute(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		pistonMessage(w, 415, "requests must be of type application/json")
		return
	}
	var req PistonRequest
	if code, err := decodeStrict(r, &req); err != nil {
		pistonMessage(w, code, "%s", err.Error())
		return
	}
	j, rt, err := s.pistonJob(&req)
	if err != nil {
		pistonMessage(w, 400, "%s", err.Error())
		return
	}
	compiled, ran, ok := s.runStaged(w, r, j)
	if !ok {
		return
	}
	version := rt.PythonVersion
	if _, l := s.language(j.language, false); l != nil && l.Version != "" {
		version = l.Version
	}
	if compiled == nil {
		writeJSON(w, 200, PistonResponse{Language: j.language, Version: version, Run: pistonStage(*ran)})
		return
	}
	resp := pistonCompiledResponse{Language: j.language, Version: version, Compile: pistonStage(*compiled)}
	if ran != nil {
		st := pistonStage(*ran)
		resp.Run = &st
	}
	writeJSON(w, 200, resp)
}

func (s *Server) pistonJob(req *PistonRequest) (*job, *Runtime, error) {
	if req.Language == nil || *req.Language == "" {
		return nil, nil, fmt.Errorf("language is required as a string")
	}
	if req.Version == nil || *req.Version == "" {
		return nil, nil, fmt.Errorf("version is required as a string")
	}
	if req.Files == nil {
		return nil, nil, fmt.Errorf("files is required as an array")
	}
	rt, lname, l := s.pistonRuntime(*req.Language, *req.Version)
	if rt == nil {
		return nil, nil, fmt.Errorf("%s-%s runtime is unknown", *req.Language, *req.Version)
	}
	if len(req.Files) == 0 || len(req.Files) > maxFiles {
		return nil, nil, fmt.Errorf("files must include at least one utf8 encoded file (and at most %d)", maxFiles)
	}
	j := &job{language: lname, runtime: rt}
	lim := &RunLimits{}
	if t := req.RunTimeout; t != nil && *t != 0 {
		if *t < 0 {
			return nil, nil, fmt.Errorf("run_timeout must be non-negative")
		}
		lim.TimeoutSeconds = *t / 1000
	}
	if m := req.RunMemoryLimit; m != nil && *m > 0 {
		lim.MemoryBytes = *m
	} else if m != nil && *m < -1 {
		return nil, nil, fmt.Errorf("run_memory_limit must be non-negative (or -1 for none)")
	}
	if err := s.limits(lim, j); err != nil {
		return nil, nil, fmt.Errorf("%s", strings.NewReplacer("limits.timeout_seconds", "run_timeout (in seconds)", "limits.memory_bytes", "run_memory_limit").Replace(err.Error()))
	}
	if t := req.RunCPUTime; t != nil && *t != 0 {
		most := s.conf().MaxTimeout
		d, ok := durationWithin(*t, time.Millisecond, most)
		if !ok {
			return nil, nil, fmt.Errorf("run_cpu_time must be at least 1 and at most %d ms", most.Milliseconds())
		}
		j.cpuTime = d
	}
	seen := map[string]bool{}
	for i, f := range req.Files {
		if f.Content == nil {
			return nil, nil, fmt.Errorf("files[%d].content is required as a string", i)
		}
		name := f.Name
		if name == "" && i == 0 {
			name = l.File // a compiler tells the language by the extension
		} else if name == "" {
			name = fmt.Sprintf("file%d.code", i)
		}
		p, err := jailPath(fmt.Sprintf("files[%d].name", i), name)
		if err != nil {
			return nil, nil, err
		}
		if seen[p] {
			return nil, nil, fmt.Errorf("files[%d].name %q is given twice", i, name)
		}
		seen[p] = true
		var data []byte
		switch f.Encoding {
		case "", "utf8":
			data = []byte(*f.Content)
		case "base64":
			if data, err = base64.StdEncoding.DecodeString(*f.Content); err != nil {
				return nil, nil, fmt.Errorf("files[%d].content is not base64: %v", i, err)
			}
		case "hex":
			if data, err = hex.DecodeString(*f.Content); err != nil {
				return nil, nil, fmt.Errorf("files[%d].content is not hex: %v", i, err)
			}
		default:
			return nil, nil, fmt.Errorf("files[%d].encoding %q is not utf8, base64 or hex", i, f.Encoding)
		}
		if i == 0 && f.Encoding != "" && f.Encoding != "utf8" {
			return nil, nil, fmt.Errorf("files must include at least one utf8 encoded file: the first is the one run")
		}
		j.files = append(j.files, inFile{path: p, data: data, mode: 0o644})
	}
	for i, a := range req.Args {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, nil, fmt.Errorf("args[%d] may not contain NUL", i)
		}
	}
	code := j.files[0]
	j.files = j.files[1:]
	if err := s.setLanguage(j, lname, l, code.data, code.path, req.Args); err != nil {
		return nil, nil, err
	}
	j.runtime = rt // python: the rootfs whose version matched
	if err := pistonCompileLimits(req, j, *s.conf()); err != nil {
		return nil, nil, err
	}
	j.stdin = req.Stdin
	return j, rt, nil
}

// pistonStage maps a run onto Piston's stage result: status TO for a
// timeout (signal SIGKILL, as Piston reports it), SG for another signal,
// RE for a non-zero exit, OL/EL for output over the limit, XX when rljail
// could not run it. output is stdout then stderr: the jail's pumps keep
// the two streams apart, not their interleaving.
func pistonStage(o outcome) PistonStage {
	res := o.result
	st := PistonStage{Stdout: o.stdout.Text, Stderr: o.stderr.Text, Output: o.stdout.Text + o.stderr.Text,
		CPUTime: res.CPUUserMS + res.CPUSystemMS, WallTime: res.WallMS, Memory: res.MemoryPeakBytes}
	str := func(s string) *string { return &s }
	switch {
	case res.Status == jail.StatusSetupError:
		st.Status, st.Message = str("XX"), str(res.Error)
	case res.Status == jail.StatusTimeout:
		st.Status, st.Signal, st.Message = str("TO"), str("SIGKILL"), str(res.Error)
	case res.Signal != 0:
		st.Status, st.Signal = str("SG"), str(unix.SignalName(unix.Signal(res.Signal)))
		if res.Error != "" {
			st.Message = str(res.Error)
		}
	default:
		code := res.ExitCode
		st.Code = &code
		if code != 0 {
			st.Status = str("RE")
		}
	}
	if res.StdoutTruncated || o.stdout.Cut > 0 {
		st.Status, st.Message = str("OL"), str("stdout length exceeded")
	} else if res.StderrTruncated || o.stderr.Cut > 0 {
		st.Status, st.Message = str("EL"), str("stderr length exceeded")
	}
	return st
}
