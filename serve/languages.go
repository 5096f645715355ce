package serve

import (
	"fmt"
	"net/http"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/rljail/rljail/jail"
)

// This file is the server's languages: what a request's `language` (SandboxFusion's
// /run_code, Piston's /api/v2/execute, /v1/run with code) chooses. A language is a
// rootfs of Config.Rootfs and the commands that run code on it: an optional compile
// stage and a run stage, each a jail of its own with its own limits (the supervisor
// enforces each stage's timeout; nothing in the jail does). docs/api.md, "Languages".

// Language is one runtime of the configuration.
type Language struct {
	// Rootfs names the root filesystem (one of Config.Rootfs) both stages run on.
	Rootfs string
	// File is the name the code is written to in /tmp (main.cpp: a compiler tells
	// the language by the extension).
	File string
	// Compile, when set, is the compile stage's argv; Run is the run stage's. In
	// both, {file} is the code's path and {out} the compile stage's output, which
	// the run stage finds at the same path, executable.
	Compile []string
	Run     []string
	// Version is what Piston's runtimes list says and its version field matches
	// ("" for python: the rootfs's Python version).
	Version string
	// Aliases are Piston's other names of the language (py, python3 for python).
	Aliases []string
	// Memory, when set, is both stages' memory limit where a request names none
	// (Node.js reserves more than 512 MiB of address space at its start, which
	// RLIMIT_AS, the rootless fallback of the memory limit, counts).
	Memory int64
}

// outPath is {out}: where a compile stage writes the program the run stage runs.
const outPath = "/tmp/a.out"

// maxProgram bounds the compiled program carried from the compile stage's jail to
// the run stage's (it is held in memory meanwhile).
const maxProgram = 64 << 20

// defaultLanguages is the languages without a [languages] block: python3 on the
// default rootfs.
func defaultLanguages(defaultRootfs string) map[string]*Language {
	return map[string]*Language{"python": {Rootfs: defaultRootfs, File: "main.py", Run: []string{"python3", "{file}"},
		Aliases: []string{"py", "py3", "python3"}}}
}

// languageFile is a [languages.NAME] block of the configuration file.
type languageFile struct {
	Rootfs  string   `toml:"rootfs"`
	File    string   `toml:"file"`
	Compile []string `toml:"compile"`
	Run     []string `toml:"run"`
	Version string   `toml:"version"`
	Aliases []string `toml:"aliases"`
	Memory  string   `toml:"memory"`
}

// parseLanguages checks the [languages] blocks; defaultRootfs is the rootfs a block
// without one runs on. Every refusal names the block and the key.
func parseLanguages(blocks map[string]languageFile, defaultRootfs string) (map[string]*Language, error) {
	if len(blocks) == 0 {
		return nil, nil
	}
	out := map[string]*Language{}
	names := map[string]string{} // a name or alias -> the block that has it
	for _, name := range slices.Sorted(mapKeys(blocks)) {
		b := blocks[name]
		where := "languages." + name
		if !validLanguageName(name) {
			return nil, fmt.Errorf("[%s]: a language name is letters, digits, _ . + - (at most 32)", where)
		}
		l := &Language{Rootfs: b.Rootfs, File: b.File, Compile: b.Compile, Run: b.Run, Version: b.Version, Aliases: b.Aliases}
		if l.Rootfs == "" {
			l.Rootfs = defaultRootfs
		}
		if len(l.Run) == 0 || l.Run[0] == "" {
			return nil, fmt.Errorf("[%s] run: the run stage's command is required (such as [\"bash\", \"{file}\"])", where)
		}
		if l.File == "" || strings.ContainsAny(l.File, "/\x00") || l.File == "." || l.File == ".." || path.Join("/tmp", l.File) == outPath {
			return nil, fmt.Errorf("[%s] file: a plain file name for the code in /tmp is required (such as \"main.sh\"), not %q", where, l.File)
		}
		for _, stage := range []struct {
			key  string
			argv []string
		}{{"compile", l.Compile}, {"run", l.Run}} {
			for i, a := range stage.argv {
				if strings.IndexByte(a, 0) >= 0 {
					return nil, fmt.Errorf("[%s] %s[%d]: an argument may not contain NUL", where, stage.key, i)
				}
				rest := strings.NewReplacer("{file}", "", "{out}", "").Replace(a)
				if strings.ContainsAny(rest, "{}") {
					return nil, fmt.Errorf("[%s] %s[%d] %q: the placeholders are {file} and {out}", where, stage.key, i, a)
				}
				if strings.Contains(a, "{out}") && len(l.Compile) == 0 {
					return nil, fmt.Errorf("[%s] %s[%d]: {out} is the compile stage's output, and the language has no compile stage", where, stage.key, i)
				}
			}
		}
		if len(b.Compile) > 0 && b.Compile[0] == "" {
			return nil, fmt.Errorf("[%s] compile[0]: the program may not be empty", where)
		}
		if b.Memory != "" {
			n, err := ParseSize(b.Memory)
			if err != nil || n <= 0 {
				return nil, fmt.Errorf("[%s] memory: %q is not a positive size (such as 1g)", where, b.Memory)
			}
			l.Memory = n
		}
		if l.Version == "" && name != "python" {
			l.Version = "0"
		}
		for _, n := range append([]string{name}, l.Aliases...) {
			if other, ok := names[n]; ok {
				return nil, fmt.Errorf("[%s]: the name %q is also [languages.%s]'s", where, n, other)
			}
			if !validLanguageName(n) {
				return nil, fmt.Errorf("[%s] aliases: %q is not a language name (letters, digits, _ . + -)", where, n)
			}
			names[n] = name
		}
		out[name] = l
	}
	if _, ok := names["python"]; !ok {
		out["python"] = defaultLanguages(defaultRootfs)["python"]
		for _, a := range out["python"].Aliases {
			if _, taken := names[a]; taken {
				return nil, fmt.Errorf("[languages.%s]: the name %q is the default python's: configure [languages.python] too", names[a], a)
			}
		}
	}
	return out, nil
}

func validLanguageName(n string) bool {
	if n == "" || len(n) > 32 {
		return false
	}
	for _, c := range n {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("_.+-", c)) {
			return false
		}
	}
	return true
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// withLanguageRootfs adds each language's rootfs to c.Rootfs (after the default,
// which stays first): a rootfs a language names is one the server must resolve.
func (c Config) withLanguageRootfs() Config {
	for _, name := range slices.Sorted(mapKeys(c.Languages)) {
		if r := c.Languages[name].Rootfs; r != "" && !slices.Contains(c.Rootfs, r) {
			c.Rootfs = append(slices.Clone(c.Rootfs), r)
		}
	}
	return c
}

// language finds a language by name (or, for Piston, alias).
func (s *Server) language(name string, aliases bool) (string, *Language) {
	langs := s.conf().Languages
	if l, ok := langs[name]; ok {
		return name, l
	}
	if aliases {
		for _, n := range slices.Sorted(mapKeys(langs)) {
			if slices.Contains(langs[n].Aliases, name) {
				return n, langs[n]
			}
		}
	}
	return "", nil
}

// languageNames lists the configured languages for a message.
func (s *Server) languageNames() string {
	return strings.Join(slices.Sorted(mapKeys(s.conf().Languages)), ", ")
}

// compileStage is a job's compile stage: its argv and limits.
type compileStage struct {
	command []string
	timeout time.Duration
	memory  int64
}

// expand puts the paths in for the placeholders of argv.
func expand(argv []string, file string) []string {
	r := strings.NewReplacer("{file}", file, "{out}", outPath)
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = r.Replace(a)
	}
	return out
}

// setLanguage makes j run code in language l: the code at /tmp/FILE (or at file,
// when the request named it), the run stage's argv followed by args, and the
// compile stage when l has one (its limits are the run's until the caller sets
// them).
func (s *Server) setLanguage(j *job, name string, l *Language, code []byte, file string, args []string) error {
	rt, err := s.runtime("language", l.Rootfs)
	if err != nil {
		return fmt.Errorf("language %s: %w", name, err)
	}
	if file == "" {
		file = path.Join("/tmp", l.File)
	}
	j.runtime, j.language = rt, name
	if c := s.conf(); l.Memory > 0 && j.memory == c.DefaultMemory {
		if l.Memory > c.MaxMemory {
			return fmt.Errorf("language %s: its memory %d is above the server's max_memory %d", name, l.Memory, c.MaxMemory)
		}
		j.memory = l.Memory
	}
	j.command = append(expand(l.Run, file), args...)
	j.files = append(j.files, inFile{path: file, data: code, mode: 0o644})
	if len(l.Compile) > 0 {
		j.compile = &compileStage{command: expand(l.Compile, file), timeout: j.timeout, memory: j.memory}
	}
	return nil
}

// runStaged runs j's compile stage, when it has one, and then, when that
// succeeded, its run stage: two jails, one after the other, each through runJob
// (a slot, the queue, the metrics, the audit). compiled is nil without a compile
// stage; ran is nil when the compile stage failed (or timed out). ok is false when
// runJob already answered (queue full, draining, client gone).
func (s *Server) runStaged(w http.ResponseWriter, r *http.Request, j *job) (compiled, ran *outcome, ok bool) {
	if j.compile != nil {
		c := *j
		c.command, c.timeout, c.memory = j.compile.command, j.compile.timeout, j.compile.memory
		c.cpuTime, c.compile = 0, nil
		// The compiler gets the request's files in /tmp and nothing of
		// what the request was granted for its program: no volume, no
		// network.
		c.volumes, c.egress = nil, nil
		c.fetch, c.asked, c.fetchMax = []string{outPath}, []string{outPath}, maxProgram
		o, ok := s.runJob(w, r, &c)
		if !ok {
			return nil, nil, false
		}
		compiled = &o
		if o.result.Status != jail.StatusOK || o.result.ExitCode != 0 {
			return compiled, nil, true
		}
		run := *j
		run.files = slices.Clone(j.files)
		for _, f := range o.files {
			if f.Path == outPath && f.Error == "" {
				run.files = append(run.files, inFile{path: outPath, data: f.Data, mode: 0o755})
			}
		}
		o.files = nil
		j = &run
	}
	o, ok := s.runJob(w, r, j)
	if !ok {
		return compiled, nil, false
	}
	return compiled, &o, true
}

// stagedRunCodeResponse is SandboxFusion's answer for a run with or without a
// compile stage: a compile stage that failed is status Failed with its
// compile_result and no run_result (as SandboxFusion answers, and as verl's
// reward reads a compile error or timeout).
func stagedRunCodeResponse(compiled, ran *outcome, j *job, req *RunCodeRequest, pod *string) RunCodeResponse {
	if ran != nil {
		resp := runCodeResponse(*ran, j, req, pod)
		if compiled != nil {
			resp.CompileResult = runCodeResponse(*compiled, j, req, pod).RunResult
		}
		return resp
	}
	resp := runCodeResponse(*compiled, j, req, pod)
	resp.CompileResult, resp.RunResult, resp.Files = resp.RunResult, nil, map[string]string{}
	if resp.Status == "Success" {
		resp.Status = "Failed" // a compile stage that exited 0 always has a run
	}
	return resp
}

// pistonCompiledResponse is Piston's execute answer for a compiled language: run
// is left out when the compile stage failed, as Piston does (it runs nothing).
type pistonCompiledResponse struct {
	Language string       `json:"language"`
	Version  string       `json:"version"`
	Run      *PistonStage `json:"run,omitempty"`
	Compile  PistonStage  `json:"compile"`
}

// pythonRootfs are the rootfs Piston lists python for: every one but those only
// another language names (a bash rootfs holds python3 too, for the launcher).
func (s *Server) pythonRootfs() []string {
	var out []string
	c := s.conf()
	for _, name := range c.Rootfs {
		other := false
		for n, l := range c.Languages {
			other = other || n != "python" && l.Rootfs == name
		}
		if _, py := c.Languages["python"]; !other || py && c.Languages["python"].Rootfs == name {
			out = append(out, name)
		}
	}
	return out
}

// languageRuntimes are Piston's runtimes entries of the languages but python.
func (s *Server) languageRuntimes() []PistonRuntime {
	var out []PistonRuntime
	langs := s.conf().Languages
	for _, n := range slices.Sorted(mapKeys(langs)) {
		l := langs[n]
		if n == "python" && l.Version == "" {
			continue // listed per rootfs, with its Python version
		}
		aliases := l.Aliases
		if aliases == nil {
			aliases = []string{}
		}
		out = append(out, PistonRuntime{Language: n, Version: l.Version, Aliases: aliases, Runtime: l.Rootfs})
	}
	return out
}

// pistonRuntime finds the runtime a Piston request's language and version name:
// python by the Python version of one of its rootfs (the first that matches), the
// other languages by their configured version. nil: Piston's "runtime is unknown".
func (s *Server) pistonRuntime(language, version string) (*Runtime, string, *Language) {
	name, l := s.language(language, true)
	if l == nil {
		return nil, "", nil
	}
	if name == "python" && l.Version == "" {
		for _, rf := range s.pythonRootfs() {
			if rt := s.opts.Runtimes[rf]; rt != nil && pistonVersionMatches(version, rt.PythonVersion) {
				return rt, name, l
			}
		}
		return nil, "", nil
	}
	rt := s.opts.Runtimes[l.Rootfs]
	if rt == nil || !pistonVersionMatches(version, l.Version) {
		return nil, "", nil
	}
	return rt, name, l
}

// pistonCompileLimits sets a compiled language's compile stage from Piston's
// compile_timeout (ms) and compile_memory_limit (bytes), within the server's
// maximum; without them the stage has the run's limits.
func pistonCompileLimits(req *PistonRequest, j *job, c Config) error {
	if j.compile == nil {
		return nil
	}
	if t := req.CompileTimeout; t != nil && *t != 0 {
		d, ok := durationWithin(*t, time.Millisecond, c.MaxTimeout)
		if !ok {
			return fmt.Errorf("compile_timeout must be at least 1 and at most %d ms (the server's max_timeout)", c.MaxTimeout.Milliseconds())
		}
		j.compile.timeout = d
	}
	if m := req.CompileMemoryLimit; m != nil && *m > 0 {
		if *m > c.MaxMemory {
			return fmt.Errorf("compile_memory_limit %d is above the server's maximum of %d", *m, c.MaxMemory)
		}
		j.compile.memory = *m
	} else if m != nil && *m < -1 {
		return fmt.Errorf("compile_memory_limit must be non-negative (or -1 for none)")
	}
	return nil
}

// RunCompile is /v1/run's compile stage: its report and streams.
type RunCompile struct {
	Result rawJSON   `json:"result"`
	Stdout RunStream `json:"stdout"`
	Stderr RunStream `json:"stderr"`
}

func runCompile(o outcome) (*RunCompile, error) {
	report, err := o.result.AppendJSON(nil)
	if err != nil {
		return nil, fmt.Errorf("encode the compile stage's report: %w", err)
	}
	return &RunCompile{Result: report, Stdout: runStream(o.stdout, o.result.StdoutBytes), Stderr: runStream(o.stderr, o.result.StderrBytes)}, nil
}
