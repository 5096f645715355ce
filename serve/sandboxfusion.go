package serve

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/rljail/rljail/jail"
)

// SandboxFusion's POST /run_code (bytedance/SandboxFusion,
// sandbox/server/sandbox_api.py): its request and response shapes, so
// that a client written for it (verl's sandbox_fusion reward, for one)
// works unchanged. docs/api.md says what each field does here.

// RunCodeRequest is SandboxFusion's request model.
type RunCodeRequest struct {
	CompileTimeout *float64           `json:"compile_timeout"`
	RunTimeout     *float64           `json:"run_timeout"`
	MemoryLimitMB  *int64             `json:"memory_limit_MB"`
	Code           *string            `json:"code"`
	Stdin          *string            `json:"stdin"`
	Language       *string            `json:"language"`
	Files          map[string]*string `json:"files"`
	FetchFiles     []string           `json:"fetch_files"`
}

// CommandRunResult is SandboxFusion's result of one stage.
type CommandRunResult struct {
	Status        string   `json:"status"` // Finished, Error, TimeLimitExceeded
	ExecutionTime *float64 `json:"execution_time"`
	ReturnCode    *int     `json:"return_code"`
	Stdout        *string  `json:"stdout"`
	Stderr        *string  `json:"stderr"`
}

// RunCodeResponse is SandboxFusion's response model.
type RunCodeResponse struct {
	Status          string            `json:"status"` // Success, Failed, SandboxError
	Message         string            `json:"message"`
	CompileResult   *CommandRunResult `json:"compile_result"`
	RunResult       *CommandRunResult `json:"run_result"`
	ExecutorPodName *string           `json:"executor_pod_name"`
	Files           map[string]string `json:"files"`
}

// sandboxFusionLanguages is SandboxFusion's Language literal: another
// value is its 422, one of these that rljail has no runtime for is a
// SandboxError (as SandboxFusion answers a runner that fails).
var sandboxFusionLanguages = []string{"python", "cpp", "nodejs", "go", "go_test", "java", "php", "csharp", "bash",
	"typescript", "sql", "rust", "cuda", "lua", "R", "perl", "D_ut", "ruby", "scala", "julia", "pytest", "junit",
	"kotlin_script", "jest", "verilog", "python_gpu", "lean", "swift", "racket"}

// validationError is FastAPI's 422 body, the shape SandboxFusion's
// clients get for a request its model refuses.
type validationError struct {
	Detail []validationDetail `json:"detail"`
}

type validationDetail struct {
	Type string   `json:"type"`
	Loc  []string `json:"loc"`
	Msg  string   `json:"msg"`
}

func writeValidation(w http.ResponseWriter, code int, typ, field, msg string) {
	loc := []string{"body"}
	if field != "" {
		loc = append(loc, field)
	}
	writeJSON(w, code, validationError{Detail: []validationDetail{{Type: typ, Loc: loc, Msg: msg}}})
}

func (s *Server) handleRunCode(w http.ResponseWriter, r *http.Request) {
	var req RunCodeRequest
	if code, err := decodeStrict(r, &req); err != nil {
		typ := "json_invalid"
		if code == 413 {
			typ = "too_large"
		}
		writeValidation(w, max(code, 422), typ, "", err.Error())
		return
	}
	j, field, err := s.runCodeJob(&req)
	if err != nil {
		writeValidation(w, 422, "value_error", field, err.Error())
		return
	}
	var pod *string
	if name := os.Getenv("MY_POD_NAME"); name != "" {
		pod = &name
	}
	if j == nil { // a language of SandboxFusion's that has no runtime here
		writeJSON(w, 200, RunCodeResponse{Status: "SandboxError", Message: fmt.Sprintf("language %s has no runtime on this rljail server (it has %s)", *req.Language, s.languageNames()), ExecutorPodName: pod, Files: map[string]string{}})
		return
	}
	compiled, ran, ok := s.runStaged(w, r, j)
	if !ok {
		return
	}
	writeJSON(w, 200, stagedRunCodeResponse(compiled, ran, j, &req, pod))
}

// runCodeJob checks a /run_code request; field names the field an error
// is about. A nil job with no error: the language is SandboxFusion's but
// not served here.
func (s *Server) runCodeJob(req *RunCodeRequest) (*job, string, error) {
	if req.Code == nil {
		return nil, "code", errors.New("field required")
	}
	if req.Language == nil {
		return nil, "language", errors.New("field required")
	}
	lang := *req.Language
	lname, l := s.language(lang, lang == "python3")
	if l == nil {
		if slices.Contains(sandboxFusionLanguages, lang) {
			return nil, "", nil
		}
		return nil, "language", fmt.Errorf("input should be one of %s", "'"+strings.Join(sandboxFusionLanguages, "', '")+"'")
	}
	j := &job{language: lname}
	lim := &RunLimits{}
	if t := req.RunTimeout; t != nil {
		if *t <= 0 {
			return nil, "run_timeout", fmt.Errorf("run_timeout %v must be above 0", *t)
		}
		lim.TimeoutSeconds = *t
	}
	if m := req.MemoryLimitMB; m != nil && *m > 0 {
		if most := s.conf().MaxMemory >> 20; *m > most {
			return nil, "memory_limit_MB", fmt.Errorf("memory_limit_MB %d is above the server's maximum of %d", *m, most)
		}
		lim.MemoryBytes = *m << 20
	} else if m != nil && *m != -1 && *m != 0 {
		return nil, "memory_limit_MB", fmt.Errorf("memory_limit_MB %d must be positive, or -1 for the server's default", *m)
	}
	if err := s.limits(lim, j); err != nil {
		field, _, _ := strings.Cut(strings.TrimPrefix(err.Error(), "limits."), " ")
		if field == "timeout_seconds" {
			field = "run_timeout"
		}
		return nil, field, err
	}
	if err := s.setLanguage(j, lname, l, []byte(*req.Code), "", nil); err != nil {
		return nil, "language", err
	}
	if t := req.CompileTimeout; t != nil && j.compile != nil {
		most := s.conf().MaxTimeout
		d, ok := durationWithin(*t, time.Second, most)
		if !ok {
			return nil, "compile_timeout", fmt.Errorf("compile_timeout %v must be at least 0.001 and at most %v (the server's max_timeout)", *t, most.Seconds())
		}
		j.compile.timeout = d
	}
	codeFile := j.files[0].path
	if req.Stdin != nil {
		j.stdin = *req.Stdin
	}
	if len(req.Files) > maxFiles || len(req.FetchFiles) > maxFiles {
		return nil, "files", fmt.Errorf("at most %d files and %d fetch_files", maxFiles, maxFiles)
	}
	names := make([]string, 0, len(req.Files))
	for name := range req.Files {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		content := req.Files[name]
		// SandboxFusion skips a null content and a name that says so.
		if content == nil || strings.Contains(name, "IGNORE_THIS_FILE") {
			continue
		}
		p, err := jailPath("files", name)
		if err != nil {
			return nil, "files", err
		}
		if p == codeFile || p == outPath {
			return nil, "files", fmt.Errorf("files: %s is where the code goes", name)
		}
		data, err := base64.StdEncoding.DecodeString(*content)
		if err != nil {
			return nil, "files", fmt.Errorf("files[%q] is not base64: %v", name, err)
		}
		j.files = append(j.files, inFile{path: p, data: data, mode: 0o644})
	}
	for _, name := range req.FetchFiles {
		p, err := jailPath("fetch_files", name)
		if err != nil {
			return nil, "fetch_files", err
		}
		j.fetch = append(j.fetch, p)
		j.asked = append(j.asked, name)
	}
	return j, "", nil
}

// runCodeResponse maps a run onto SandboxFusion's answer: a timeout is
// TimeLimitExceeded (no return code), rljail failing to run it is Error
// (status SandboxError), everything else Finished with the exit code (a
// signal's death -N, as Python's subprocess gives it).
func runCodeResponse(o outcome, j *job, req *RunCodeRequest, pod *string) RunCodeResponse {
	res := o.result
	secs := float64(res.WallMS) / 1000
	out, errs := o.stdout.Text, o.stderr.Text
	rr := &CommandRunResult{Status: "Finished", ExecutionTime: &secs, Stdout: &out, Stderr: &errs}
	resp := RunCodeResponse{ExecutorPodName: pod, RunResult: rr, Files: map[string]string{}}
	switch res.Status {
	case jail.StatusTimeout:
		rr.Status = "TimeLimitExceeded"
		resp.Status = "Failed"
	case jail.StatusSetupError:
		rr.Status = "Error"
		msg := res.Error
		rr.Stderr = &msg
		resp.Status, resp.Message = "SandboxError", msg
	default:
		code := res.ExitCode
		if res.Signal != 0 {
			code = -res.Signal
		}
		rr.ReturnCode = &code
		resp.Status = "Success"
		if code != 0 {
			resp.Status = "Failed"
		}
	}
	// Keys as the request spelt them; a file that is not there is left
	// out, as SandboxFusion does.
	for _, f := range o.files {
		if f.Error == "" {
			resp.Files[f.Path] = base64.StdEncoding.EncodeToString(f.Data)
		}
	}
	return resp
}
