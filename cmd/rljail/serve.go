package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/rljail/rljail/hostcheck"
	"github.com/rljail/rljail/hostfile"
	"github.com/rljail/rljail/jail"
	"github.com/rljail/rljail/profiles"
	"github.com/rljail/rljail/seccomp"
	"github.com/rljail/rljail/serve"
)

// serveCommand is `rljail serve`: the executor service (package serve,
// docs/api.md).
func serveCommand() *cli.Command {
	return &cli.Command{
		Name:         "serve",
		Usage:        "serve runs over HTTP/1.1 and JSON: POST /v1/run, SandboxFusion's /run_code, Piston's /api/v2 (docs/api.md)",
		UsageText:    "rljail serve [--listen unix:PATH|tcp:HOST:PORT] [--token-file FILE | --tokens-file FILE] [--config FILE] [--max-concurrent N]",
		OnUsageError: usageError,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "listen", Usage: "unix:PATH or tcp:HOST:PORT (default unix:/run/rljail/api.sock as root, else unix:$XDG_RUNTIME_DIR/rljail/api.sock; under systemd socket activation the socket it passes, which --listen must then name if given)"},
			&cli.StringFlag{Name: "socket-mode", Value: "0600", Usage: "mode of the Unix socket: who may connect (0600 the owner only, 0660 its group too)"},
			&cli.StringFlag{Name: "token-file", Usage: "file holding the Bearer token every request but /healthz must carry (needed on TCP)"},
			&cli.StringFlag{Name: "tokens-file", Usage: "TOML file of the clients, each [tokens.NAME] with its token (or token_sha256) and quotas max_concurrent, max_sessions (docs/api.md); not with --token-file"},
			&cli.BoolFlag{Name: "insecure-no-token", Usage: "allow TCP without a token, on a loopback address only (anyone on this host may then run jails)"},
			&cli.StringFlag{Name: "config", Usage: "TOML file with the server's policy: maximum limits, permitted rootfs names, queue (docs/api.md)"},
			&cli.IntFlag{Name: "max-concurrent", Usage: "most jails at once (default: the CPU count)"},
			&cli.StringFlag{Name: "drain-grace", Value: "30s", Usage: "on SIGTERM or SIGINT: how long running jails may go on before they are killed"},
			&cli.StringFlag{Name: "cgroup-parent", Usage: "create every jail's cgroup below this existing cgroup"},
			&cli.StringFlag{Name: "audit-log", Usage: "append one JSON line per jail (route, client, argv, the files put in with their sha256 and text, stdin's sha256, the result) to FILE"},
			&cli.IntFlag{Name: "warm", Usage: "keep N jails per rootfs made ahead of their requests (the warm pool, docs/api.md); 0: none"},
		}, llmFlags("the runner of each session: its WebSocket or its callback_url")...),
		Action: serveAction,
	}
}

// serveAction sets the server up from its flags, listens and serves until
// SIGTERM or SIGINT, then drains.
func serveAction(c *cli.Context) error {
	guard := hostfile.NewGuard(nil, jail.IsJailHostUID)
	cfg, err := readServeConfig(guard, c.String("config"))
	if err != nil {
		return setupError("%v", err)
	}
	// Every host path the server's jails may write from now on (the rw
	// volumes of this configuration and of every one a reload took since)
	// is a place the server reads none of its own files from: a jail that
	// rewrote the configuration there would grant itself more at the next
	// SIGHUP.
	granted := cfg.WritableSources()
	if guard, err = policyGuard(c, granted); err != nil {
		return setupError("%v", err)
	}
	token := ""
	if p := c.String("token-file"); p != "" {
		data, err := guard.ReadFile("--token-file", p, 4096)
		if err != nil {
			return setupError("read the token: %v", err)
		}
		if token = strings.TrimSpace(string(data)); len(token) < 16 || strings.ContainsAny(token, " \t\r\n") {
			return setupError("--token-file %s: a token is one word of at least 16 characters", p)
		}
	}
	var tokens *serve.Tokens
	if p := c.String("tokens-file"); p != "" {
		if token != "" {
			return setupError("--token-file and --tokens-file both given: give one (a tokens file holds as many clients as needed)")
		}
		if tokens, err = readTokens(guard, p); err != nil {
			return setupError("%v", err)
		}
	}
	runtimes := map[string]*serve.Runtime{}
	for _, name := range cfg.Rootfs {
		dir, namedBy, err := locateRootfs(name, "")
		if err != nil {
			return setupError("rootfs %s: %v", name, err)
		}
		if err := checkRootfsPlace(dir, guard); err != nil {
			return setupError("rootfs %s: %v", name, err)
		}
		m, build, err := rootfsVerdict(dir, namedBy)
		if err != nil {
			return setupError("rootfs %s: %v", name, err)
		}
		if build {
			return setupError("rootfs %s: nothing built at %s yet (rljail rootfs build)", name, dir)
		}
		runtimes[name] = &serve.Runtime{Name: name, Dir: dir, PythonVersion: m.PythonVersion,
			Check: func(warn func(string)) error { return startRootfsCheck(dir).wait(warn) }}
	}
	if err := checkServeVolumes(guard, cfg, runtimes); err != nil {
		return setupError("%v", err)
	}
	progs, err := serveProfiles(cfg.Profiles)
	if err != nil {
		return setupError("%v", err)
	}
	grace, err := parseDuration("drain-grace", c.String("drain-grace"))
	if err != nil {
		return setupError("%v", err)
	}
	maxConc := c.Int("max-concurrent")
	if c.IsSet("max-concurrent") && maxConc <= 0 {
		return setupError("--max-concurrent %d must be positive", maxConc)
	}
	warm := c.Int("warm")
	if warm < 0 || warm > 64 {
		return setupError("--warm %d must be between 0 and 64", warm)
	}
	if maxConc == 0 {
		maxConc = runtime.NumCPU()
	}
	// The collector works harder as the heap nears twice the bodies the
	// server may hold (and some room), rather than at twice the live heap
	// (GOGC's default): a burst of large bodies then costs their size a
	// few times over, not that again for the garbage.
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(2*cfg.BodyBudget + 256<<20)
	}
	var audit *os.File
	if p := c.String("audit-log"); p != "" {
		f, _, err := guard.OpenWrite("--audit-log", p, unix.O_WRONLY|unix.O_APPEND, 0o600)
		if err != nil {
			return setupError("open the audit log: %v", err)
		}
		defer f.Close()
		audit = f
	}
	// Who answers the sessions' model calls: their runners, or the
	// server itself (--llm openai, one endpoint for every session).
	llm, llmMode, llmKey, err := llmFromFlags(c)
	if err != nil {
		return setupError("%v", err)
	}
	// SIGHUP is taken before the socket exists: one sent as soon as a
	// client can connect is a reload, never the signal's default end.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	ln, where, err := serveListen(c, token != "" || tokens != nil)
	if err != nil {
		return setupError("%v", err)
	}
	defer ln.Close()
	// The host check, once: /readyz says whether a jail can run here.
	report := hostcheck.Run(hostcheck.Options{Binary: jail.CheckBinary, ProbeUserns: jail.Probe, ProbeOverlay: jail.ProbeOverlay})
	var ready error
	if !report.CanRun() {
		ready = errors.New("rljail check finds that a jail cannot run on this host")
	}
	log := slog.New(slog.NewJSONHandler(c.App.ErrWriter, nil))
	opts := serve.Options{Config: cfg, Runtimes: runtimes, MaxConcurrent: maxConc, Token: token, Tokens: tokens,
		Seccomp: progs, CgroupParent: c.String("cgroup-parent"), Ready: func() error { return ready }, Log: log, Warm: warm}
	if audit != nil {
		opts.Audit = audit
	}
	if llm != nil {
		opts.LLM, opts.LLMMode, opts.LLMKey = llm, llmMode, llmKey
	}
	srv := serve.New(opts)
	defer srv.Drain() // the warm pool's jails go, however serving ends
	hs := &http.Server{
		Handler: srv.Handler(),
		// A slow client holds no slot: its headers within 10 s, its
		// body within a minute; a slot is taken only once the body is
		// read.
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       serve.RequestReadTimeout,
		// The queue's wait, the run, and a minute to write the answer;
		// a run's end gives its answer a minute again (runJob), for a
		// request of two stages or a slow body.
		WriteTimeout:   cfg.QueueWait + cfg.MaxTimeout + time.Minute,
		IdleTimeout:    time.Minute,
		MaxHeaderBytes: 64 << 10,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		// A Unix peer's uid owns the sessions it makes (serve.ConnContext).
		ConnContext: serve.ConnContext,
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	served := make(chan error, 1)
	// At most max_connections connections at once: one beyond is closed
	// at its accept (serve.LimitListener).
	go func() { served <- hs.Serve(srv.LimitListener(ln)) }()
	notifySystemd(log, readyStatus(where, ready))
	log.Info("serving", "listen", where, "max_concurrent", maxConc, "warm", warm, "queue", cfg.Queue, "rootfs", cfg.Rootfs, "version", version)
wait:
	for {
		select {
		case err := <-served:
			return setupError("serve: %v", err)
		case <-hup:
			granted = reloadServe(c, log, srv, runtimes, granted)
		case sig := <-sigs:
			log.Info("draining", "signal", sig.String(), "grace", grace.String())
			break wait
		}
	}
	// Drain: no new connections nor runs; running jails have the grace,
	// then are killed and their requests answered.
	notifySystemd(log, "STOPPING=1\nSTATUS=draining")
	srv.Drain()
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := hs.Shutdown(ctx); err != nil {
		srv.Kill()
		ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel2()
		if hs.Shutdown(ctx2) != nil {
			_ = hs.Close()
		}
	}
	log.Info("drained")
	return nil
}

// serveListen opens the socket systemd passed (serve_systemd.go), or else
// --listen. A Unix socket's mode is its access control:
// it is made under a umask that leaves it only --socket-mode's bits, so
// that no one else may connect for a moment between bind and chmod. TCP
// needs a token, or --insecure-no-token on a loopback address.
func serveListen(c *cli.Context, haveToken bool) (net.Listener, string, error) {
	if ln, where, ok, err := activatedListener(c, haveToken); ok || err != nil {
		return ln, where, err
	}
	listen := c.String("listen")
	if listen == "" {
		dir := "/run/rljail"
		if os.Geteuid() != 0 {
			rt := os.Getenv("XDG_RUNTIME_DIR")
			if rt == "" {
				return nil, "", errors.New("no --listen given and $XDG_RUNTIME_DIR is not set: give --listen unix:PATH")
			}
			dir = filepath.Join(rt, "rljail")
		}
		listen = "unix:" + filepath.Join(dir, "api.sock")
	}
	kind, addr, ok := strings.Cut(listen, ":")
	switch {
	case ok && kind == "unix" && addr != "":
		mode, err := strconv.ParseUint(c.String("socket-mode"), 8, 32)
		if err != nil || mode&^0o660 != 0 || mode&0o600 != 0o600 {
			return nil, "", fmt.Errorf("--socket-mode %q: give 0600 or 0660 (owner read-write, and its group's at most)", c.String("socket-mode"))
		}
		if err := os.MkdirAll(filepath.Dir(addr), 0o755); err != nil {
			return nil, "", fmt.Errorf("make the socket's directory: %w", err)
		}
		if st, err := os.Lstat(addr); err == nil {
			if st.Mode()&os.ModeSocket == 0 {
				return nil, "", fmt.Errorf("--listen %s: the path exists and is not a socket", addr)
			}
			if conn, err := net.DialTimeout("unix", addr, time.Second); err == nil {
				conn.Close()
				return nil, "", fmt.Errorf("--listen %s: another server answers there", addr)
			}
			_ = os.Remove(addr) // a socket no server holds: a previous run's
		}
		old := syscall.Umask(0o777 &^ int(mode))
		ln, err := net.Listen("unix", addr)
		syscall.Umask(old)
		if err != nil {
			return nil, "", fmt.Errorf("listen on %s: %w", addr, err)
		}
		if err := os.Chmod(addr, os.FileMode(mode)); err != nil {
			ln.Close()
			return nil, "", fmt.Errorf("set the socket's mode: %w", err)
		}
		owned, err := ownSocket(ln.(*net.UnixListener), addr)
		if err != nil {
			ln.Close()
			return nil, "", err
		}
		return owned, listen, nil
	case ok && kind == "tcp" && addr != "":
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, "", fmt.Errorf("--listen %s: %v", listen, err)
		}
		ip := net.ParseIP(host)
		loopback := host == "localhost" || (ip != nil && ip.IsLoopback())
		if !haveToken && !(loopback && c.Bool("insecure-no-token")) {
			return nil, "", fmt.Errorf("--listen %s: TCP needs --token-file or --tokens-file (or, on a loopback address only, --insecure-no-token)", listen)
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, "", fmt.Errorf("listen on %s: %w", addr, err)
		}
		return ln, "tcp:" + ln.Addr().String(), nil
	}
	return nil, "", fmt.Errorf("--listen %q: give unix:PATH or tcp:HOST:PORT", listen)
}

// ownedSocket is a Unix listener that, closed, removes its path only
// while the path is still the socket it bound: if the socket was deleted
// and another server has bound one of its own there since, closing this
// one leaves the successor's in place (net.UnixListener would unlink it).
type ownedSocket struct {
	*net.UnixListener
	path     string
	dev, ino uint64
}

// ownSocket takes ln's removal at close from net (which unlinks the path
// whatever it holds by then) and records the inode bound at path.
func ownSocket(ln *net.UnixListener, path string) (*ownedSocket, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return nil, fmt.Errorf("stat the socket %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false)
	return &ownedSocket{UnixListener: ln, path: path, dev: uint64(st.Dev), ino: st.Ino}, nil
}

// Close closes the listener, then removes its path if it is still this
// listener's socket.
func (s *ownedSocket) Close() error {
	err := s.UnixListener.Close()
	var st syscall.Stat_t
	if syscall.Lstat(s.path, &st) == nil && uint64(st.Dev) == s.dev && st.Ino == s.ino {
		_ = os.Remove(s.path)
	}
	return err
}

// readServeConfig reads --config through guard (DefaultConfig without one).
func readServeConfig(guard *hostfile.Guard, p string) (serve.Config, error) {
	if p == "" {
		return serve.DefaultConfig, nil
	}
	data, err := guard.ReadFile("--config", p, 1<<20)
	if err != nil {
		return serve.Config{}, fmt.Errorf("read the configuration: %w", err)
	}
	cfg, err := serve.ParseConfig(data)
	if err != nil {
		return serve.Config{}, fmt.Errorf("configuration %s: %w", p, err)
	}
	return cfg, nil
}

// readTokens reads --tokens-file through guard.
func readTokens(guard *hostfile.Guard, p string) (*serve.Tokens, error) {
	data, err := guard.ReadFile("--tokens-file", p, 1<<20)
	if err != nil {
		return nil, fmt.Errorf("read the tokens file: %w", err)
	}
	tokens, err := serve.ParseTokens(data)
	if err != nil {
		return nil, fmt.Errorf("--tokens-file %s: %w", p, err)
	}
	return tokens, nil
}

// reloadServe is SIGHUP: --config and --tokens-file read again, through
// the guard, and made the policy of the requests from now on. A file that
// cannot be read or parsed, or a change only a restart can make, keeps the
// policy as it was: one log line says which and why, and the server goes
// on serving.
//
// granted are the host paths the server's jails could write so far (rw
// volumes of every configuration taken since the start): the files are
// read only from outside them and outside the new configuration's. The
// paths granted after this reload are returned.
func reloadServe(c *cli.Context, log *slog.Logger, srv *serve.Server, runtimes map[string]*serve.Runtime, granted []string) []string {
	guard, err := policyGuard(c, granted)
	var cfg serve.Config
	if err == nil {
		cfg, err = readServeConfig(guard, c.String("config"))
	}
	more := append(append([]string(nil), granted...), cfg.WritableSources()...)
	sort.Strings(more)
	more = slices.Compact(more)
	if err == nil {
		guard, err = policyGuard(c, more)
	}
	if err == nil {
		err = checkServeVolumes(guard, cfg, runtimes)
	}
	var tokens *serve.Tokens
	if p := c.String("tokens-file"); err == nil && p != "" {
		tokens, err = readTokens(guard, p)
	}
	if err == nil {
		err = srv.Reload(cfg, tokens)
	}
	if err != nil {
		log.Error("reload refused; the policy is as it was", "error", err.Error())
		return granted
	}
	log.Info("reloaded", "config", c.String("config"), "tokens_file", c.String("tokens-file"))
	return more
}

// policyGuard is the guard for the server's own files given the host
// paths its jails may write (writable): it refuses --config,
// --tokens-file, --token-file and --audit-log inside one of them, by
// path and (when the guard opens them) by what was opened.
func policyGuard(c *cli.Context, writable []string) (*hostfile.Guard, error) {
	guard := hostfile.NewGuard(writable, jail.IsJailHostUID)
	for _, f := range []string{"config", "tokens-file", "token-file", "audit-log"} {
		if p := c.String(f); p != "" {
			if err := guard.Check("--"+f, p); err != nil {
				return nil, err
			}
		}
	}
	return guard, nil
}

// checkServeVolumes applies to the configuration's volumes that a request
// may ask for rw the checks a run applies to -v ...:rw, through the same
// code: no rootfs the server serves inside one or one itself
// (checkRootfsPlace), none over or inside rljail's data directory of
// root filesystems (checkDataDirVolumes). A request names volumes only
// among these, so a configuration that passes grants no request more.
func checkServeVolumes(guard *hostfile.Guard, cfg serve.Config, runtimes map[string]*serve.Runtime) error {
	writable := cfg.WritableSources()
	if len(writable) == 0 {
		return nil
	}
	g := guard.With(writable...)
	for _, name := range cfg.Rootfs {
		if rt := runtimes[name]; rt != nil {
			if err := checkRootfsPlace(rt.Dir, g); err != nil {
				return fmt.Errorf("[volumes]: rootfs %s: %w", name, err)
			}
		}
	}
	if err := checkDataDirVolumes(writable); err != nil {
		return fmt.Errorf("[volumes]: %w", err)
	}
	return nil
}

// serveProfiles are the precompiled programs of the built-in profiles
// rljail serve can apply, by name, for the ones a configuration permits
// (profiles; a reload may permit others among them). What else a profile
// may carry the server would not apply as a run does (its defaults; its
// [network] table, which would give every request of the profile egress
// that egress_allow does not govern), so a built-in profile with any of
// it is left out, and a configuration that permits it refused (by
// serveAction, or by Reload as a profile without a program).
func serveProfiles(permitted []string) (map[string]*seccomp.Program, error) {
	out := map[string]*seccomp.Program{}
	for _, name := range profiles.Names() {
		prog, ok := profiles.Precompiled(name)
		if !ok {
			return nil, fmt.Errorf("the built-in profile %s has no precompiled program (make build)", name)
		}
		p, err := profiles.Load(name)
		if err != nil {
			return nil, err
		}
		if len(p.Network.Allow) > 0 || len(p.Network.Resolve) > 0 || p.Timeout != 0 || len(p.Env) > 0 || len(p.Volumes) > 0 || p.Workdir != "" || p.Rootfs != "" {
			if slices.Contains(permitted, name) {
				return nil, fmt.Errorf("profiles: the built-in profile %s has defaults or a [network] table, which rljail serve does not apply (a request's limits, volumes and egress are its own): permit another", name)
			}
			continue
		}
		out[name] = prog
	}
	return out, nil
}
