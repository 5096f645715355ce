package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sfStyleServer is BenchmarkServeWarm's stand-in for SandboxFusion
// (github.com/bytedance/SandboxFusion), which runs each request's code as
// a plain subprocess of its Python server, isolating nothing in its
// default configuration (sandbox/configs/local.yaml: isolation "none").
// Written for this benchmark from a reading of SandboxFusion's code, none
// of it copied; Python's standard library only (SandboxFusion is FastAPI
// on uvicorn, one asyncio process), so its own per-request cost (FastAPI
// and pydantic's parsing and validation, structlog) is left out and the
// figure is a lower bound of SandboxFusion's.
//
// Per POST /run_code it takes the steps of SandboxFusion's python runner
// with isolation "none" (sandbox/server/sandbox_api.py run_code;
// sandbox/runners/major.py run_python; sandbox/runners/base.py
// restore_files, run_commands, run_command_bare;
// sandbox/utils/execution.py):
//  1. a fresh temporary directory (tempfile.TemporaryDirectory) below
//     the server's TMPDIR (SandboxFusion: /tmp);
//  2. the request's files written into it from base64, a null content or
//     a name with IGNORE_THIS_FILE skipped;
//  3. the code written to a NamedTemporaryFile with suffix .py there;
//  4. `python FILE` started through the shell (/bin/bash -c) by asyncio,
//     cwd the directory, the server's environment with PATH led by the
//     runtime's bin directory (SandboxFusion: its conda env's), stdin,
//     stdout and stderr piped;
//  5. the request's stdin written, stdin closed, and the wait under
//     asyncio.wait_for with run_timeout (default 10 s); the pipes are read
//     during the wait here (SandboxFusion reads them after it);
//  6. a process of the run still there killed with its children
//     (SandboxFusion: psutil's pid_exists and kill of the tree);
//  7. fetch_files read back as base64;
//  8. the directory removed, and the answer in SandboxFusion's shape
//     (status, run_result with status Finished or TimeLimitExceeded,
//     execution_time, return_code, stdout, stderr).
//
// It listens on 127.0.0.1 (port 0) and prints its port on stdout.
const sfStyleServer = `
import asyncio, base64, json, os, shutil, sys, tempfile, time

RUNTIME_BIN = sys.argv[1]

def restore_files(d, files):
    for name, content in (files or {}).items():
        if not isinstance(content, str) or 'IGNORE_THIS_FILE' in name:
            continue
        p = os.path.join(d, name)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, 'wb') as f:
            f.write(base64.b64decode(content))

def kill_tree(pid):
    try:
        kids = []
        for t in os.listdir('/proc/%d/task' % pid):
            with open('/proc/%d/task/%s/children' % (pid, t)) as f:
                kids += [int(x) for x in f.read().split()]
    except OSError:
        return
    for k in kids:
        kill_tree(k)
    try:
        os.kill(pid, 9)
    except OSError:
        pass

def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False

async def run_python(req):
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as d:
        restore_files(d, req.get('files'))
        with tempfile.NamedTemporaryFile(mode='w', dir=d, suffix='.py', delete=False) as f:
            f.write(req['code'])
        env = dict(os.environ)
        env['PATH'] = RUNTIME_BIN + ':' + env.get('PATH', '')
        p = await asyncio.create_subprocess_shell('python ' + f.name, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=d, executable='/bin/bash', env=env)
        stdin = req.get('stdin')
        start = time.time()
        rr = {'status': 'Finished', 'execution_time': None, 'return_code': None, 'stdout': '', 'stderr': ''}
        try:
            out, err = await asyncio.wait_for(p.communicate(stdin.encode() if stdin is not None else None),
                                              timeout=req.get('run_timeout', 10))
            rr['return_code'] = p.returncode
            rr['stdout'], rr['stderr'] = out.decode(errors='replace'), err.decode(errors='replace')
        except asyncio.TimeoutError:
            rr['status'] = 'TimeLimitExceeded'
        finally:
            rr['execution_time'] = time.time() - start
            if alive(p.pid):
                kill_tree(p.pid)
        files = {}
        for name in req.get('fetch_files') or []:
            fp = os.path.abspath(os.path.join(d, name))
            if os.path.isfile(fp):
                with open(fp, 'rb') as fh:
                    files[name] = base64.b64encode(fh.read()).decode()
    ok = rr['status'] == 'Finished' and rr['return_code'] == 0
    return {'status': 'Success' if ok else 'Failed', 'message': '', 'compile_result': None,
            'run_result': rr, 'executor_pod_name': None, 'files': files}

async def handle(reader, writer):
    try:
        while True:
            line = await reader.readline()
            if not line:
                return
            method, path, _ = line.decode().split(' ', 2)
            length = 0
            while True:
                h = await reader.readline()
                if h in (b'\r\n', b'\n', b''):
                    break
                k, _, v = h.decode().partition(':')
                if k.strip().lower() == 'content-length':
                    length = int(v)
            body = await reader.readexactly(length)
            if method == 'POST' and path == '/run_code':
                req = json.loads(body)
                if req.get('language') != 'python':
                    code, resp = 422, {'detail': 'this stand-in serves python only'}
                else:
                    code, resp = 200, await run_python(req)
            else:
                code, resp = 404, {'detail': 'Not Found'}
            b = json.dumps(resp).encode()
            writer.write(b'HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n' % (code, len(b)) + b)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()

async def main():
    srv = await asyncio.start_server(handle, '127.0.0.1', 0)
    print(srv.sockets[0].getsockname()[1], flush=True)
    async with srv:
        await srv.serve_forever()

asyncio.run(main())
`

// sfStyle is a running sfStyleServer.
type sfStyle struct {
	cmd    *exec.Cmd
	base   string
	client *http.Client
	tmp    string // its TMPDIR: the runs' directories
}

// startSFStyle writes sfStyleServer into dir and runs it with the system
// python3, its runs' python the rootfs's (runtimeBin).
func startSFStyle(b *testing.B, dir, runtimeBin string) *sfStyle {
	b.Helper()
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		b.Fatalf("the SandboxFusion-style server needs the system's python3: %v", err)
	}
	script := filepath.Join(dir, "sfstyle.py")
	writeFile(b, script, sfStyleServer, 0o644)
	s := &sfStyle{tmp: filepath.Join(dir, "sfstyle-tmp")}
	if err := os.Mkdir(s.tmp, 0o700); err != nil {
		b.Fatal(err)
	}
	s.cmd = exec.Command(py, "-I", script, runtimeBin)
	s.cmd.Env = []string{"PATH=/usr/bin:/bin", "TMPDIR=" + s.tmp, "LANG=C.UTF-8"}
	var stderr bytes.Buffer
	s.cmd.Stderr = &stderr
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		b.Fatalf("start the SandboxFusion-style server: %v", err)
	}
	b.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	})
	port := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		port <- strings.TrimSpace(line)
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case p := <-port:
		if _, err := strconv.Atoi(p); err != nil {
			b.Fatalf("the SandboxFusion-style server printed %q, not its port\n%s", p, stderr.String())
		}
		s.base = "http://127.0.0.1:" + p
	case <-time.After(30 * time.Second):
		b.Fatal("the SandboxFusion-style server did not start within 30 s")
	}
	s.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}, Timeout: 2 * time.Minute}
	return s
}

// runCodeReply is the part of SandboxFusion's answer the benchmark checks.
type runCodeReply struct {
	Status    string `json:"status"`
	RunResult *struct {
		Status     string `json:"status"`
		ReturnCode *int   `json:"return_code"`
		Stderr     string `json:"stderr"`
	} `json:"run_result"`
}

// postRunCode sends {"code": "pass", "language": "python"} to base's
// /run_code, as SandboxFusion's clients do, and requires Success.
func postRunCode(b *testing.B, c *http.Client, base string) {
	resp, err := c.Post(base+"/run_code", "application/json", strings.NewReader(`{"code": "pass", "language": "python"}`))
	if err != nil {
		b.Fatalf("POST %s/run_code: %v", base, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var r runCodeReply
	if resp.StatusCode != 200 || json.Unmarshal(body, &r) != nil || r.Status != "Success" || r.RunResult == nil ||
		r.RunResult.ReturnCode == nil || *r.RunResult.ReturnCode != 0 {
		b.Fatalf("POST %s/run_code: %d %s", base, resp.StatusCode, body)
	}
}

// poolRuns reads rljail_pool_runs_total from s's /metrics, summed by
// pool (warm, cold).
func poolRuns(b *testing.B, s *server) map[string]int {
	code, body, _ := s.do(b, "GET", "/metrics", "", nil)
	if code != 200 {
		b.Fatalf("GET /metrics: %d %s", code, body)
	}
	out := map[string]int{}
	for _, l := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(l, "rljail_pool_runs_total{") {
			continue
		}
		f := strings.Fields(l)
		n, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			b.Fatalf("/metrics: %q", l)
		}
		for _, pool := range []string{"warm", "cold"} {
			if strings.Contains(l, fmt.Sprintf("pool=%q", pool)) {
				out[pool] += int(n)
			}
		}
	}
	return out
}
