// Package serve is `rljail serve`: an HTTP/1.1 and JSON executor service
// on the run path that exists (jail.Run, one fresh jail per request). It
// answers rljail's own POST /v1/run, SandboxFusion's POST /run_code and
// Piston's /api/v2 routes, health and Prometheus metrics; it holds a
// request's body, its jail slot and its jail no longer than the request.
// docs/api.md is the reference, docs/openapi.json the schema the tests
// hold the handlers to.
package serve

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rljail/rljail/bridge"
	"github.com/rljail/rljail/seccomp"
)

// Options are what the server is given besides its policy.
type Options struct {
	Config Config
	// Runtimes are the root filesystems of Config.Rootfs, by name.
	Runtimes map[string]*Runtime
	// MaxConcurrent is the most jails at once (0: 1).
	MaxConcurrent int
	// Token, when set, is the Bearer token every request but the probes
	// /healthz and /readyz must carry.
	Token string
	// Tokens, when set (--tokens-file), are the clients, each with its
	// own token and quotas (tokens.go); not with Token.
	Tokens *Tokens
	// Seccomp are the payload's filters by profile name: the programs of
	// the profiles a configuration may permit (Config.Profiles). A
	// permitted profile without one is refused (New's caller, Reload);
	// nil: no filter (tests).
	Seccomp map[string]*seccomp.Program
	// CgroupParent places every jail's cgroup below it ("": as a run).
	CgroupParent string
	// Ready says whether the host can run a jail (rljail check), for
	// /readyz; nil: ready.
	Ready func() error
	// Log receives one JSON line per request; nil: none.
	Log *slog.Logger
	// Audit, when set, receives one JSON line per jail (auditLog): a
	// file opened O_APPEND.
	Audit io.Writer
	// Warm is how many jails per runtime the warm pool keeps made ahead
	// of their requests (pool.go); 0: every request starts one-shot.
	Warm int
	// Version is rljail's, for a session's hello.
	Version string
	// LLM, when set, answers every session's model calls (serve --llm
	// openai, named LLMMode in hello); LLMKey is its key, which no
	// session's environment may hold. Nil: the sessions' runners answer.
	LLM     bridge.Answerer
	LLMMode string
	LLMKey  string
}

// Server is the service's state: its slots, queue and metrics.
type Server struct {
	opts Options
	// policy is the configuration and the tokens file's clients now:
	// Reload (SIGHUP) swaps it; each check reads it once (conf).
	policy atomic.Pointer[policy]
	// slots holds one token per running jail; waiting counts the
	// requests queued for one.
	slots   chan struct{}
	waiting atomic.Int64
	// bodies is the bytes of request bodies held now (Config.BodyBudget).
	bodies atomic.Int64
	// kill ends every running jail: the drain's grace ran out.
	kill     context.Context
	killRuns context.CancelFunc
	draining atomic.Bool
	// drained closes at Drain: the requests queued for a slot are
	// answered 503 at once rather than started during the drain.
	drained   chan struct{}
	drainOnce sync.Once

	audit *auditLog

	sessions  *sessionSet
	callbacks *http.Client // the server's requests to sessions' callback_url

	reg      *metrics
	runs     *counterVec
	latency  *histogramVec
	inFlight *gauge
	queue    *gauge
	conns    *gauge
	rejected *counterVec
	requests *counterVec
	pool     *pool
}

// New makes a server; Handler serves it.
func New(opts Options) *Server {
	if opts.MaxConcurrent <= 0 {
		opts.MaxConcurrent = 1
	}
	s := &Server{opts: opts, slots: make(chan struct{}, opts.MaxConcurrent), drained: make(chan struct{})}
	cfg := opts.Config.withDefaults()
	s.policy.Store(&policy{cfg: &cfg, tokens: opts.Tokens})
	s.kill, s.killRuns = context.WithCancel(context.Background())
	if opts.Audit != nil {
		s.audit = &auditLog{w: opts.Audit}
	}
	s.reg = &metrics{}
	s.runs = newCounterVec("rljail_runs_total", "Jails run, by the run's status (jail.Result's) and the request's language.", "status", "language")
	s.latency = newHistogramVec("rljail_run_seconds", "Wall time of a run from its slot to its report.", []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}, "language")
	s.inFlight = &gauge{name: "rljail_runs_in_flight", help: "Jails running now."}
	s.queue = &gauge{name: "rljail_queue_depth", help: "Requests waiting for a jail slot."}
	s.conns = &gauge{name: "rljail_connections_open", help: "Connections the server holds now (max_connections at most)."}
	s.rejected = newCounterVec("rljail_rejected_total", "Requests refused before a jail, by reason.", "reason")
	s.requests = newCounterVec("rljail_http_requests_total", "HTTP requests by route and status code.", "route", "code")
	for _, f := range []family{s.runs, s.latency, s.inFlight, s.queue, s.conns, s.rejected, s.requests} {
		s.reg.add(f)
	}
	s.pool = newPool(opts.Warm, s.poolTemplates(), opts.Log, s.reg)
	s.sessions = newSessionSet(s.reg)
	s.callbacks = newCallbackClient(s.conf().Sessions.CallbackTimeout)
	return s
}

// policy is what Reload swaps: the configuration and the clients.
type policy struct {
	cfg    *Config
	tokens *Tokens
}

// conf is the configuration now.
func (s *Server) conf() *Config { return s.policy.Load().cfg }

// Reload makes cfg and tokens the policy of the checks from now on
// (SIGHUP): a run's limits and a session's configuration are fixed when
// its request is checked, so runs and sessions under way keep theirs.
// It refuses a configuration that names a root filesystem the server did
// not set up at its start (Options.Runtimes), and tokens where the server
// has none (a single --token-file, or none: the flags decide that), or
// none where it has them. A client of the new file that has the name of
// one of the old keeps its runs in flight, so its quota holds across the
// reload. A client it takes away, or whose token it changes, loses its
// sessions: their sockets closed (1008), their jails killed, the sessions
// removed (rljail_sessions_ended_total{reason="revoked"}).
// What Options fix (the socket, --max-concurrent, --warm and the
// warm pool's jails, the callback client's timeout) does not change.
func (s *Server) Reload(cfg Config, tokens *Tokens) error {
	cfg = cfg.withDefaults()
	if err := s.checkPrograms(cfg); err != nil {
		return err
	}
	for _, name := range cfg.Rootfs {
		if _, ok := s.opts.Runtimes[name]; !ok && s.opts.Runtimes != nil {
			return fmt.Errorf("rootfs %q was not set up at the start: restart the server to add a root filesystem", name)
		}
	}
	old := s.policy.Load()
	if (old.tokens == nil) != (tokens == nil) {
		return errors.New("a tokens file can be reloaded, not added or taken away: restart the server with the flags you want")
	}
	if tokens != nil {
		tokens.carryOver(old.tokens)
	}
	s.policy.Store(&policy{cfg: &cfg, tokens: tokens})
	if tokens != nil {
		// A socket was authenticated once, at its upgrade, and a session
		// lives by the token that made it: a client the reload took away
		// (or whose token it changed) keeps neither.
		s.revokeSessions(old.tokens.revoked(tokens))
	}
	return nil
}

// Handler is the server's routes, behind the token check and the body
// limit.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range s.routes() {
		mux.Handle(rt.pattern, rt.handler)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, code: 200}
		start := time.Now()
		defer func() {
			_, route := mux.Handler(r)
			if route == "" {
				route = "unmatched"
			}
			s.requests.WithLabelValues(route, strconv.Itoa(rec.code)).Inc()
			if s.opts.Log != nil {
				attrs := []any{"method", r.Method, "path", r.URL.Path, "code", rec.code, "ms", time.Since(start).Milliseconds(), "run_id", rec.runID}
				if rec.client != "" {
					attrs = append(attrs, "client", rec.client)
				}
				s.opts.Log.Info("request", attrs...)
			}
		}()
		// The probes need no token: a kubelet's probe carries no secret
		// (docs/deploy.md), and they say no more than ready or not, and why.
		probe := r.URL.Path == "/healthz" || r.URL.Path == "/readyz"
		if s.opts.Token != "" && !probe && !s.tokenOK(r) {
			rec.Header().Set("WWW-Authenticate", `Bearer realm="rljail"`)
			writeError(rec, 401, "a request needs the header Authorization: Bearer TOKEN with the server's token")
			return
		}
		if tk := s.policy.Load().tokens; tk != nil && !probe {
			c := tk.match(r)
			if c == nil {
				rec.Header().Set("WWW-Authenticate", `Bearer realm="rljail"`)
				writeError(rec, 401, "a request needs the header Authorization: Bearer TOKEN with a token of the server's tokens file")
				return
			}
			r = withClient(r, c)
			rec.client = c.Name
		}
		cfg := s.conf()
		if r.ContentLength > cfg.MaxBody {
			s.rejected.WithLabelValues("body_too_large").Inc()
			writeError(rec, 413, fmt.Sprintf("the body is larger than the server's limit of %d bytes", cfg.MaxBody))
			return
		}
		if r.Method == http.MethodPost {
			n := r.ContentLength
			if n < 0 {
				n = cfg.MaxBody // unknown length: as much as it may be
			}
			if s.bodies.Add(n) > cfg.BodyBudget {
				s.bodies.Add(-n)
				s.rejected.WithLabelValues("body_budget").Inc()
				rec.Header().Set("Retry-After", "1")
				writeError(rec, 429, fmt.Sprintf("the server holds %d bytes of request bodies at most and has no room for this one now: retry later", cfg.BodyBudget))
				return
			}
			defer s.bodies.Add(-n)
			// Its room is held from now on: the body must come at
			// bodyRate, or a client that sends headers alone (two of 64
			// MiB) would hold body_budget, and every other POST get 429,
			// for the whole request's minute.
			r.Body = &pacedBody{ReadCloser: r.Body, rc: http.NewResponseController(rec), start: time.Now()}
		}
		r.Body = http.MaxBytesReader(rec, r.Body, cfg.MaxBody)
		mux.ServeHTTP(rec, r)
	})
}

// RequestReadTimeout is how long the whole of a request may take to
// arrive (the http.Server's ReadTimeout; headers within 10 s of it).
const RequestReadTimeout = time.Minute

// A POST's body must arrive at bodyRate bytes a second after bodyGrace:
// its length's room in body_budget is held from its headers on.
const (
	bodyGrace = 10 * time.Second
	bodyRate  = 1 << 20
)

// pacedBody is a request body read against a deadline that moves with
// what has arrived: bodyGrace, then a second per bodyRate bytes, and never
// past RequestReadTimeout. Once the body is read the server clears the
// connection's read deadline itself (its background read), so that the
// run that follows is not cut short.
type pacedBody struct {
	io.ReadCloser
	rc    *http.ResponseController
	start time.Time
	got   int64
}

func (b *pacedBody) Read(p []byte) (int, error) {
	due := b.start.Add(bodyGrace + time.Duration(float64(b.got)/bodyRate*float64(time.Second)))
	if last := b.start.Add(RequestReadTimeout); due.After(last) {
		due = last
	}
	_ = b.rc.SetReadDeadline(due)
	n, err := b.ReadCloser.Read(p)
	b.got += int64(n)
	return n, err
}

// route is one of the server's routes: "METHOD /path" and its handler.
type route struct {
	pattern string
	handler http.Handler
}

// routes are every route the server has; docs/openapi.json lists the
// same (TestOpenAPIMatchesServer).
func (s *Server) routes() []route {
	rts := []route{
		{"GET /healthz", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, map[string]string{"status": "ok"}) })},
		{"GET /readyz", http.HandlerFunc(s.readyz)},
		{"GET /metrics", s.reg},
		{"POST /v1/run", http.HandlerFunc(s.handleRun)},
		{"POST /run_code", http.HandlerFunc(s.handleRunCode)},
		{"GET /api/v2/runtimes", http.HandlerFunc(s.handleRuntimes)},
		{"POST /api/v2/execute", http.HandlerFunc(s.handleExecute)},
	}
	return append(rts, s.sessionRoutes()...)
}

func (s *Server) tokenOK(r *http.Request) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(s.opts.Token)) == 1
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		writeError(w, 503, "the server is draining")
		return
	}
	if s.opts.Ready != nil {
		if err := s.opts.Ready(); err != nil {
			writeError(w, 503, "the host cannot run a jail: "+err.Error())
			return
		}
	}
	if err := s.pool.notReady(); err != nil {
		writeError(w, 503, err.Error())
		return
	}
	writeJSON(w, 200, map[string]string{"status": "ready"})
}

// Drain refuses new work from now on (503 from /readyz, and the caller
// stops accepting connections), answers the requests waiting in the
// queue 503 at once (a slot a run frees during the drain starts nothing),
// and ends every session (their jails gone
// when it returns, 15 s at most); Kill ends every running jail.
// The warm pool's waiting jails are destroyed before it returns.
func (s *Server) Drain() {
	s.draining.Store(true)
	s.drainOnce.Do(func() { close(s.drained) })
	s.pool.close()
	s.sessions.closeAll(15 * time.Second)
}

// Kill ends every running jail at once (their requests get their reports,
// status signaled or timeout as jail.Run says).
func (s *Server) Kill() { s.killRuns() }

// admission is acquire's verdict.
type admission int

const (
	admitted admission = iota
	queueFull
	gone
	draining
)

// acquire waits for a jail slot: at once when one is free, else in the
// bounded queue for at most QueueWait; queueFull when the queue is full
// or the wait ran out, gone when ctx ended while it waited, draining when
// the drain began while it waited.
func (s *Server) acquire(ctx context.Context) admission {
	select {
	case s.slots <- struct{}{}:
		s.inFlight.Inc()
		return admitted
	default:
	}
	cfg := s.conf()
	if n := s.waiting.Add(1); n > int64(cfg.Queue) {
		s.waiting.Add(-1)
		return queueFull
	}
	s.queue.Inc()
	defer func() { s.waiting.Add(-1); s.queue.Dec() }()
	wait := time.NewTimer(cfg.QueueWait)
	defer wait.Stop()
	select {
	case s.slots <- struct{}{}:
		s.inFlight.Inc()
		return admitted
	case <-wait.C:
		return queueFull
	case <-ctx.Done():
		return gone
	case <-s.drained:
		return draining
	}
}

func (s *Server) release() {
	s.inFlight.Dec()
	<-s.slots
}

// runJob runs j within a slot, or answers 429 (queue full) itself and
// returns false. The jail's context ends with the request's (a client
// that goes away gets its jail killed) or at Kill.
func (s *Server) runJob(w http.ResponseWriter, r *http.Request, j *job) (outcome, bool) {
	if s.draining.Load() {
		s.refuseDraining(w)
		return outcome{}, false
	}
	done, err := requestClient(r).startRun()
	if err != nil {
		s.rejected.WithLabelValues("client_quota").Inc()
		w.Header().Set("Retry-After", "1")
		writeError(w, 429, err.Error())
		return outcome{}, false
	}
	defer done()
	switch s.acquire(r.Context()) {
	case queueFull:
		s.rejected.WithLabelValues("queue_full").Inc()
		w.Header().Set("Retry-After", "1")
		c := s.conf()
		writeError(w, 429, fmt.Sprintf("every jail slot (%d) is busy and the queue (%d, %v each at most) is full: retry later", cap(s.slots), c.Queue, c.QueueWait))
		return outcome{}, false
	case gone:
		s.rejected.WithLabelValues("client_gone").Inc()
		return outcome{}, false
	case draining:
		s.refuseDraining(w)
		return outcome{}, false
	}
	defer s.release()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(s.kill, cancel)
	defer stop()
	start := time.Now()
	o := s.execute(ctx, j)
	// The answer may come long after the request (the body, a wait in
	// the queue, a compile stage and the run, each up to its maximum):
	// the server's write timeout counts from the run's end, as a
	// session's reply's does, so that the answer is not lost.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(time.Minute))
	s.latency.WithLabelValues(j.language).Observe(time.Since(start).Seconds())
	s.runs.WithLabelValues(o.result.Status, j.language).Inc()
	if s.audit != nil {
		if err := s.audit.record(r, auditClient(r), j, o); err != nil && s.opts.Log != nil {
			s.opts.Log.Warn("audit", "run_id", o.result.RunID, "error", err.Error())
		}
	}
	if rec, ok := w.(*statusRecorder); ok {
		rec.runID = o.result.RunID
	}
	return o, true
}

// refuseDraining answers a run the drain keeps from starting: 503 with
// Retry-After, for a client that retries (another replica behind the
// same address, or the server once it is back).
func (s *Server) refuseDraining(w http.ResponseWriter) {
	s.rejected.WithLabelValues("draining").Inc()
	w.Header().Set("Retry-After", "1")
	writeError(w, 503, "the server is draining: no new runs")
}

// statusRecorder notes a response's code and run id for the log.
type statusRecorder struct {
	http.ResponseWriter
	code   int
	runID  string
	client string // the tokens file's client, for the log line
}

func (s *statusRecorder) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = 500, []byte(`{"error":"encode the response"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// writeError answers with rljail's error shape: {"error": SENTENCE}.
func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}
