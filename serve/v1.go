package serve

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// RunRequest is POST /v1/run's body (docs/api.md).
type RunRequest struct {
	// Command is the argv to run; Code is Python source run as
	// /tmp/main.py. Exactly one of them.
	Command []string `json:"command,omitempty"`
	Code    string   `json:"code,omitempty"`
	// Args follow /tmp/main.py with Code.
	Args  []string          `json:"args,omitempty"`
	Stdin string            `json:"stdin,omitempty"`
	Env   map[string]string `json:"env,omitempty"`
	// Files go into the jail before the command; FetchFiles come out
	// after it.
	Files      []RunFile  `json:"files,omitempty"`
	FetchFiles []string   `json:"fetch_files,omitempty"`
	Rootfs     string     `json:"rootfs,omitempty"`
	Limits     *RunLimits `json:"limits,omitempty"`
	// Language, with Code, names a configured language (languages.go)
	// instead of python3 on Rootfs.
	Language string `json:"language,omitempty"`
	// Volumes are configured host paths asked for by name (volumes.go);
	// a request with any is served cold.
	Volumes []VolumeRequest `json:"volumes,omitempty"`
	// Egress are --allow-host rules, each covered by egress_allow
	// (egress.go); a request with any is served cold.
	Egress []string `json:"egress,omitempty"`
	// Profile is a built-in profile among the configuration's profiles
	// (profile.go): the payload's seccomp program.
	Profile string `json:"profile,omitempty"`
}

// RunFile is a file put into the jail: Content as text, or ContentBase64.
type RunFile struct {
	Path          string `json:"path"`
	Content       string `json:"content,omitempty"`
	ContentBase64 string `json:"content_base64,omitempty"`
	Executable    bool   `json:"executable,omitempty"`
}

// RunLimits are a run's limits, each within the server's maximum.
type RunLimits struct {
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty"`
	MemoryBytes    int64   `json:"memory_bytes,omitempty"`
	CPUs           float64 `json:"cpus,omitempty"`
	Pids           int64   `json:"pids,omitempty"`
	TmpSizeBytes   int64   `json:"tmp_size_bytes,omitempty"`
	OutputBytes    int64   `json:"output_bytes,omitempty"`
	FetchBytes     int64   `json:"fetch_bytes,omitempty"`
}

// RunStream is stdout or stderr in a response: head and tail within the
// output limit.
type RunStream struct {
	Text      string `json:"text"`
	Bytes     int64  `json:"bytes"`
	CutBytes  int64  `json:"cut_bytes"`
	Truncated bool   `json:"truncated"`
}

// RunFetched is a file taken out: its bytes in base64, or why not.
type RunFetched struct {
	Path          string `json:"path"`
	ContentBase64 string `json:"content_base64,omitempty"`
	Error         string `json:"error,omitempty"`
}

// maxFiles bounds the files a request may put in or take out.
const maxFiles = 1000

// fileMode is what a put file's mode is.
func fileMode(executable bool) uint32 {
	if executable {
		return 0o755
	}
	return 0o644
}

// minCPUs is the least CPU limit a jail takes (jail.Spec's check).
const minCPUs = 0.01

// durationWithin is v, in units of unit, as a duration, and ok when that
// is at least a millisecond and at most most. Less than a millisecond
// would round to 0 (or nearly), which the jail and the session read as
// "none given": their defaults (10 s, a cell's 30 s, a call's 120 s),
// whatever the server's maximum; NaN and infinities are refused too.
func durationWithin(v float64, unit, most time.Duration) (time.Duration, bool) {
	d := v * float64(unit)
	if !(d >= float64(time.Millisecond)) || d > float64(most) {
		return 0, false
	}
	return time.Duration(d), true
}

// limits checks a request's limits against the policy and fills the
// defaults; every refusal names its field.
func (s *Server) limits(l *RunLimits, j *job) error {
	c := s.conf()
	if l == nil {
		l = &RunLimits{}
	}
	j.timeout, j.memory, j.keep, j.fetchMax = c.DefaultTimeout, c.DefaultMemory, c.DefaultOutput, c.MaxFetch
	if t := l.TimeoutSeconds; t != 0 {
		d, ok := durationWithin(t, time.Second, c.MaxTimeout)
		if !ok {
			return fmt.Errorf("limits.timeout_seconds %v must be at least 0.001 and at most %v (the server's max_timeout)", t, c.MaxTimeout.Seconds())
		}
		j.timeout = d
	}
	ints := []struct {
		name string
		v    int64
		max  int64
		into *int64
	}{
		{"limits.memory_bytes", l.MemoryBytes, c.MaxMemory, &j.memory},
		{"limits.pids", l.Pids, c.MaxPids, &j.pids},
		{"limits.tmp_size_bytes", l.TmpSizeBytes, c.MaxTmpSize, &j.tmpSize},
		{"limits.output_bytes", l.OutputBytes, c.MaxOutput, &j.keep},
		{"limits.fetch_bytes", l.FetchBytes, c.MaxFetch, &j.fetchMax},
	}
	for _, f := range ints {
		if f.v == 0 {
			continue
		}
		if f.v < 0 || f.v > f.max {
			return fmt.Errorf("%s %d must be above 0 and at most %d (the server's maximum)", f.name, f.v, f.max)
		}
		*f.into = f.v
	}
	if v := l.CPUs; v != 0 {
		if !(v >= minCPUs) || v > c.MaxCPUs {
			return fmt.Errorf("limits.cpus %v must be at least %v and at most %v (the server's max_cpus)", v, minCPUs, c.MaxCPUs)
		}
		j.cpus = v
	}
	return nil
}

// runtime picks the rootfs a request names, among the configuration's.
func (s *Server) runtime(field, name string) (*Runtime, error) {
	if name == "" {
		name = s.conf().Rootfs[0]
	}
	rt, ok := s.opts.Runtimes[name]
	if !ok {
		return nil, fmt.Errorf("%s %q is not a root filesystem this server permits (%s)", field, name, strings.Join(s.conf().Rootfs, ", "))
	}
	return rt, nil
}

func (s *Server) handleRun(w http.ResponseWriter, r *http.Request) {
	var req RunRequest
	if code, err := decodeStrict(r, &req); err != nil {
		writeError(w, code, err.Error())
		return
	}
	j, err := s.v1Job(&req)
	if err != nil {
		writeError(w, 400, err.Error())
		return
	}
	compiled, ran, ok := s.runStaged(w, r, j)
	if !ok {
		return
	}
	if ran == nil { // the compile stage failed: its report is the answer's
		c, err := runCompile(*compiled)
		if err != nil {
			writeError(w, 500, err.Error())
			return
		}
		writeJSON(w, 200, RunResponse{Result: c.Result, Stdout: c.Stdout, Stderr: c.Stderr, Files: []RunFetched{}, Compile: c})
		return
	}
	o := *ran
	report, err := o.result.AppendJSON(nil)
	if err != nil {
		writeError(w, 500, "encode the run's report: "+err.Error())
		return
	}
	resp := RunResponse{Result: report, Stdout: runStream(o.stdout, o.result.StdoutBytes), Stderr: runStream(o.stderr, o.result.StderrBytes), Files: fetched(o.files), Pool: o.pool, PoolReason: o.poolReason}
	if compiled != nil {
		if resp.Compile, err = runCompile(*compiled); err != nil {
			writeError(w, 500, err.Error())
			return
		}
	}
	writeJSON(w, 200, resp)
}

// RunResponse is POST /v1/run's answer.
type RunResponse struct {
	// Result is the run's report, the same JSON as --result.
	Result rawJSON      `json:"result"`
	Stdout RunStream    `json:"stdout"`
	Stderr RunStream    `json:"stderr"`
	Files  []RunFetched `json:"files"`
	// Compile is a compiled language's compile stage, left out otherwise.
	Compile *RunCompile `json:"compile,omitempty"`
	// Pool is how the run's jail started: "warm", a jail of the warm
	// pool made ahead of the request, or "cold", one made for it;
	// PoolReason says why cold (docs/api.md, "Warm pool").
	Pool       string `json:"pool"`
	PoolReason string `json:"pool_reason,omitempty"`
}

// rawJSON is the run's report as jail.Result.AppendJSON wrote it (the
// same bytes as --result).
type rawJSON []byte

func (r rawJSON) MarshalJSON() ([]byte, error) { return r, nil }

func runStream(s captured, written int64) RunStream {
	return RunStream{Text: s.Text, Bytes: max(written, s.total), CutBytes: max(written, s.total) - (s.total - s.Cut), Truncated: max(written, s.total) > s.total-s.Cut}
}

func fetched(files []outFile) []RunFetched {
	out := []RunFetched{}
	for _, f := range files {
		rf := RunFetched{Path: f.Path, Error: f.Error}
		if f.Error == "" {
			rf.ContentBase64 = base64.StdEncoding.EncodeToString(f.Data)
		}
		out = append(out, rf)
	}
	return out
}

// v1Job checks a /v1/run request and makes its job.
func (s *Server) v1Job(req *RunRequest) (*job, error) {
	j := &job{language: "command"}
	switch {
	case len(req.Command) > 0 && req.Code != "":
		return nil, fmt.Errorf("command and code: give one of them, not both")
	case len(req.Command) > 0:
		if len(req.Args) > 0 {
			return nil, fmt.Errorf("args: only with code (a command carries its own arguments)")
		}
		j.command = req.Command
	case req.Code != "" && req.Language != "":
		if req.Rootfs != "" {
			return nil, fmt.Errorf("language and rootfs: a language names its rootfs, give one of them")
		}
		name, l := s.language(req.Language, false)
		if l == nil {
			return nil, fmt.Errorf("language %q is not one this server runs (%s)", req.Language, s.languageNames())
		}
		if err := s.limits(req.Limits, j); err != nil {
			return nil, err
		}
		if err := s.setLanguage(j, name, l, []byte(req.Code), "", req.Args); err != nil {
			return nil, err
		}
	case req.Language != "":
		return nil, fmt.Errorf("language: only with code (a command names its own program)")
	case req.Code != "":
		j.language = "python"
		j.command = append([]string{"python3", codePath}, req.Args...)
		j.files = append(j.files, inFile{path: codePath, data: []byte(req.Code), mode: 0o644})
	default:
		return nil, fmt.Errorf("command or code: a run needs one of them")
	}
	for i, a := range j.command {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, fmt.Errorf("command[%d]: an argument may not contain NUL", i)
		}
	}
	if j.command[0] == "" {
		return nil, fmt.Errorf("command[0]: the program may not be empty")
	}
	var err error
	if j.runtime == nil {
		if j.runtime, err = s.runtime("rootfs", req.Rootfs); err != nil {
			return nil, err
		}
		if err := s.limits(req.Limits, j); err != nil {
			return nil, err
		}
	}
	if j.volumes, err = s.volumes(req.Volumes); err != nil {
		return nil, err
	}
	if j.egress, err = s.egressEntries(req.Egress); err != nil {
		return nil, err
	}
	if j.profile, err = s.profile("profile", req.Profile); err != nil {
		return nil, err
	}
	j.stdin = req.Stdin
	for k, v := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			return nil, fmt.Errorf("env %q: a name must be non-empty without = or NUL, a value without NUL", k)
		}
		j.env = append(j.env, k+"="+v)
	}
	if len(req.Files) > maxFiles || len(req.FetchFiles) > maxFiles {
		return nil, fmt.Errorf("files, fetch_files: at most %d each", maxFiles)
	}
	seen := map[string]bool{outPath: j.compile != nil}
	if req.Code != "" {
		seen[j.files[0].path] = true
	}
	for i, f := range req.Files {
		field := fmt.Sprintf("files[%d].path", i)
		p, err := jailPathIn(field, f.Path, j.volumes, false)
		if err != nil {
			return nil, err
		}
		if seen[p] {
			return nil, fmt.Errorf("%s: %s is given twice (or is where code goes)", field, p)
		}
		seen[p] = true
		data := []byte(f.Content)
		if f.ContentBase64 != "" {
			if f.Content != "" {
				return nil, fmt.Errorf("files[%d]: give content or content_base64, not both", i)
			}
			if data, err = base64.StdEncoding.DecodeString(f.ContentBase64); err != nil {
				return nil, fmt.Errorf("files[%d].content_base64 is not base64: %v", i, err)
			}
		}
		j.files = append(j.files, inFile{path: p, data: data, mode: fileMode(f.Executable)})
	}
	for i, p := range req.FetchFiles {
		abs, err := jailPathIn(fmt.Sprintf("fetch_files[%d]", i), p, j.volumes, true)
		if err != nil {
			return nil, err
		}
		j.fetch = append(j.fetch, abs)
		j.asked = append(j.asked, p)
	}
	return j, nil
}
