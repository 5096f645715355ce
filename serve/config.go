package serve

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"

	"github.com/rljail/rljail/egress"
	"github.com/rljail/rljail/jail"
	"github.com/rljail/rljail/profiles"
)

// Config is the server's policy: the most a request may ask for, what it
// gets when it asks for nothing, and the root filesystems it may name. A
// zero Config is usable: DefaultConfig's values fill what is left zero.
type Config struct {
	// MaxTimeout, MaxMemory, MaxCPUs, MaxPids, MaxTmpSize bound a
	// request's limits; a request that asks for more is refused (400).
	MaxTimeout time.Duration
	MaxMemory  int64
	MaxCPUs    float64
	MaxPids    int64
	MaxTmpSize int64
	// MaxOutput bounds what a response keeps of stdout and of stderr
	// (head and tail), and MaxFetch the bytes of the files taken out.
	MaxOutput int64
	MaxFetch  int64
	// PumpOutput is how many bytes of each stream the jail's pump reads
	// before it discards the rest (jail.Resources.OutputBytes): the
	// response's tail is the tail of these.
	PumpOutput int64
	// Default* are a request's limits when it names none.
	DefaultTimeout time.Duration
	DefaultMemory  int64
	DefaultOutput  int64
	// MaxBody is the largest request body (413 beyond it), and
	// BodyBudget the bytes of bodies the server holds at once, as sent
	// (Content-Length, or MaxBody for a body of unknown length): a
	// request beyond it gets 429, so that clients that all send large
	// bodies cannot make the server hold more than about three times it
	// (a body, its decoded strings, the files' bytes).
	MaxBody    int64
	BodyBudget int64
	// Rootfs names the root filesystems a request may name; the first is
	// the default. Empty: "python".
	Rootfs []string
	// Queue is how many requests may wait for a jail slot, and QueueWait
	// how long each may wait; beyond either a request gets 429.
	Queue     int
	QueueWait time.Duration
	// MaxConnections is how many connections (TCP or Unix, idle,
	// mid-request or a session's WebSocket) the server holds at once; one
	// beyond it is closed as soon as it is accepted (LimitListener), so
	// that idle connections cannot take the server's descriptors.
	MaxConnections int

	// Languages are the runtimes a request's language names (languages.go), by
	// name; their rootfs join Rootfs. Empty: python, python3 on the default
	// rootfs.
	Languages map[string]*Language
	// Sessions is the policy of /v1/sessions (sessions.go).
	Sessions SessionPolicy
	// Volumes are the host paths a request may ask for by name
	// (volumes.go); none by default.
	Volumes map[string]VolumePolicy
	// EgressAllow are the egress rules a request may ask for (egress.go);
	// none by default: no request gets a network.
	EgressAllow []egress.Rule
	// Profiles are the built-in profiles a request may name (profile.go);
	// the first is the default. Empty: profiles.Default.
	Profiles []string
}

// DefaultConfig is the policy without a configuration file.
var DefaultConfig = Config{
	MaxTimeout:     60 * time.Second,
	MaxMemory:      2 << 30,
	MaxCPUs:        2,
	MaxPids:        256,
	MaxTmpSize:     512 << 20,
	MaxOutput:      8 << 20,
	MaxFetch:       16 << 20,
	PumpOutput:     64 << 20,
	DefaultTimeout: 10 * time.Second,
	DefaultMemory:  512 << 20,
	DefaultOutput:  1 << 20,
	MaxBody:        64 << 20,
	BodyBudget:     128 << 20,
	Rootfs:         []string{"python"},
	Profiles:       []string{profiles.Default},
	Queue:          64,
	QueueWait:      30 * time.Second,
	MaxConnections: 1024,
}

// withDefaults fills c's zero fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig
	if c.MaxTimeout == 0 {
		c.MaxTimeout = d.MaxTimeout
	}
	if c.MaxMemory == 0 {
		c.MaxMemory = d.MaxMemory
	}
	if c.MaxCPUs == 0 {
		c.MaxCPUs = d.MaxCPUs
	}
	if c.MaxPids == 0 {
		c.MaxPids = d.MaxPids
	}
	if c.MaxTmpSize == 0 {
		c.MaxTmpSize = d.MaxTmpSize
	}
	if c.MaxOutput == 0 {
		c.MaxOutput = d.MaxOutput
	}
	if c.MaxFetch == 0 {
		c.MaxFetch = d.MaxFetch
	}
	if c.PumpOutput == 0 {
		c.PumpOutput = d.PumpOutput
	}
	if c.DefaultTimeout == 0 {
		c.DefaultTimeout = min(d.DefaultTimeout, c.MaxTimeout)
	}
	if c.DefaultMemory == 0 {
		c.DefaultMemory = min(d.DefaultMemory, c.MaxMemory)
	}
	if c.DefaultOutput == 0 {
		c.DefaultOutput = min(d.DefaultOutput, c.MaxOutput)
	}
	if c.MaxBody == 0 {
		c.MaxBody = d.MaxBody
	}
	if c.BodyBudget == 0 {
		c.BodyBudget = max(d.BodyBudget, c.MaxBody)
	}
	if len(c.Rootfs) == 0 {
		c.Rootfs = d.Rootfs
	}
	if len(c.Profiles) == 0 {
		c.Profiles = d.Profiles
	}
	if c.Queue == 0 {
		c.Queue = d.Queue
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = d.MaxConnections
	}
	if c.QueueWait == 0 {
		c.QueueWait = d.QueueWait
	}
	c.Sessions = c.Sessions.withDefaults()
	if len(c.Languages) == 0 {
		c.Languages = defaultLanguages(c.Rootfs[0])
	}
	return c.withLanguageRootfs()
}

// configFile is the TOML file's shape (docs/api.md, "Configuration").
type configFile struct {
	MaxTimeout     string   `toml:"max_timeout"`
	MaxMemory      string   `toml:"max_memory"`
	MaxCPUs        float64  `toml:"max_cpus"`
	MaxPids        int64    `toml:"max_pids"`
	MaxTmpSize     string   `toml:"max_tmp_size"`
	MaxOutput      string   `toml:"max_output"`
	MaxFetch       string   `toml:"max_fetch"`
	PumpOutput     string   `toml:"pump_output"`
	DefaultTimeout string   `toml:"default_timeout"`
	DefaultMemory  string   `toml:"default_memory"`
	DefaultOutput  string   `toml:"default_output"`
	MaxBody        string   `toml:"max_body"`
	BodyBudget     string   `toml:"body_budget"`
	Rootfs         []string `toml:"rootfs"`
	Queue          int      `toml:"queue"`
	MaxConnections int      `toml:"max_connections"`
	QueueWait      string   `toml:"queue_wait"`

	Languages map[string]languageFile `toml:"languages"`
	// Sessions is the [sessions] table.
	Sessions sessionsFile `toml:"sessions"`
	// Volumes are the [volumes.NAME] tables.
	Volumes map[string]volumeFile `toml:"volumes"`
	// EgressAllow is egress_allow, --allow-host's spelling.
	EgressAllow []string `toml:"egress_allow"`
	Profiles    []string `toml:"profiles"`
}

// ParseConfig reads a configuration file's TOML strictly: an unknown key
// is an error, so that a misspelt limit is not silently the default.
func ParseConfig(data []byte) (Config, error) {
	var f configFile
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		var sm *toml.StrictMissingError
		if errors.As(err, &sm) {
			return Config{}, fmt.Errorf("unknown key: %s", strings.TrimSpace(sm.String()))
		}
		return Config{}, err
	}
	var c Config
	var err error
	durs := []struct {
		key, v string
		into   *time.Duration
	}{{"max_timeout", f.MaxTimeout, &c.MaxTimeout}, {"default_timeout", f.DefaultTimeout, &c.DefaultTimeout}, {"queue_wait", f.QueueWait, &c.QueueWait}}
	for _, d := range durs {
		if d.v == "" {
			continue
		}
		if *d.into, err = time.ParseDuration(d.v); err != nil || *d.into <= 0 {
			return Config{}, fmt.Errorf("%s %q is not a positive duration (such as 30s)", d.key, d.v)
		}
	}
	sizes := []struct {
		key, v string
		into   *int64
	}{
		{"max_memory", f.MaxMemory, &c.MaxMemory}, {"max_tmp_size", f.MaxTmpSize, &c.MaxTmpSize},
		{"max_output", f.MaxOutput, &c.MaxOutput}, {"max_fetch", f.MaxFetch, &c.MaxFetch},
		{"pump_output", f.PumpOutput, &c.PumpOutput}, {"default_memory", f.DefaultMemory, &c.DefaultMemory},
		{"default_output", f.DefaultOutput, &c.DefaultOutput}, {"max_body", f.MaxBody, &c.MaxBody},
		{"body_budget", f.BodyBudget, &c.BodyBudget},
	}
	for _, s := range sizes {
		if s.v == "" {
			continue
		}
		if *s.into, err = ParseSize(s.v); err != nil {
			return Config{}, fmt.Errorf("%s: %w", s.key, err)
		}
	}
	if f.MaxCPUs < 0 || math.IsNaN(f.MaxCPUs) || math.IsInf(f.MaxCPUs, 0) {
		return Config{}, fmt.Errorf("max_cpus %v must be a positive number", f.MaxCPUs)
	}
	if f.MaxPids < 0 || f.Queue < 0 {
		return Config{}, errors.New("max_pids and queue must be positive")
	}
	if f.MaxConnections < 0 {
		return Config{}, fmt.Errorf("max_connections %d must be positive", f.MaxConnections)
	}
	c.MaxCPUs, c.MaxPids, c.Rootfs, c.Queue, c.MaxConnections = f.MaxCPUs, f.MaxPids, f.Rootfs, f.Queue, f.MaxConnections
	defaultRootfs := DefaultConfig.Rootfs[0]
	if len(c.Rootfs) > 0 {
		defaultRootfs = c.Rootfs[0]
	}
	if c.Languages, err = parseLanguages(f.Languages, defaultRootfs); err != nil {
		return Config{}, err
	}
	if c.Sessions, err = f.Sessions.policy(); err != nil {
		return Config{}, fmt.Errorf("[sessions] %w", err)
	}
	if c.Volumes, err = parseVolumes(f.Volumes); err != nil {
		return Config{}, err
	}
	if c.EgressAllow, err = parseEgressAllow(f.EgressAllow); err != nil {
		return Config{}, err
	}
	if c.Profiles, err = parseProfiles(f.Profiles); err != nil {
		return Config{}, err
	}
	c = c.withDefaults()
	if c.DefaultTimeout > c.MaxTimeout || c.DefaultMemory > c.MaxMemory || c.DefaultOutput > c.MaxOutput {
		return Config{}, errors.New("a default_* value is above its max_* value")
	}
	if c.BodyBudget < c.MaxBody {
		return Config{}, errors.New("body_budget is below max_body: no body of max_body could ever be taken")
	}
	return c, nil
}

// ParseSize reads a byte size of the configuration (jail.ParseSize: 512m,
// 1g, 65536).
func ParseSize(s string) (int64, error) {
	n, err := jail.ParseSize(s)
	if err != nil {
		return 0, fmt.Errorf("%q %v", s, err)
	}
	return n, nil
}

// SessionPolicy is the [sessions] block of the configuration: how many
// sessions the server holds and for how long, and the most one may ask
// for beyond the jail's limits (those are the run's max_* keys). A zero
// SessionPolicy takes DefaultSessionPolicy's values.
type SessionPolicy struct {
	// IdleTimeout closes a session that had no request for that long
	// (its jail gone).
	IdleTimeout time.Duration
	// MaxTimeout bounds a session's whole life (its jail's timeout),
	// DefaultTimeout is it when a request names none.
	MaxTimeout     time.Duration
	DefaultTimeout time.Duration
	// MaxCellTimeout bounds one cell's timeout.
	MaxCellTimeout time.Duration
	// MaxSessions is the most sessions open at once, MaxPerClient the
	// most one client (a token, a Unix peer's uid) holds.
	MaxSessions  int
	MaxPerClient int
	// MaxLLMCalls, MaxToolCalls and MaxCallTimeout bound the bridge's
	// budgets a session may ask for.
	MaxLLMCalls    int
	MaxToolCalls   int
	MaxCallTimeout time.Duration
	// CallbackTimeout bounds one request of the server to a session's
	// callback_url, CallbackMaxBytes its answer.
	CallbackTimeout  time.Duration
	CallbackMaxBytes int64
	// CallbackAllow, when not empty, are the only places a callback_url
	// may lie below (callback.go).
	CallbackAllow []callbackPrefix
}

// DefaultSessionPolicy is the [sessions] policy without the table.
var DefaultSessionPolicy = SessionPolicy{
	IdleTimeout:      10 * time.Minute,
	MaxTimeout:       time.Hour,
	DefaultTimeout:   30 * time.Minute,
	MaxCellTimeout:   5 * time.Minute,
	MaxSessions:      64,
	MaxPerClient:     16,
	MaxLLMCalls:      1000,
	MaxToolCalls:     1000,
	MaxCallTimeout:   10 * time.Minute,
	CallbackTimeout:  2 * time.Minute,
	CallbackMaxBytes: 8 << 20,
}

func (p SessionPolicy) withDefaults() SessionPolicy {
	d := DefaultSessionPolicy
	for _, f := range []struct{ v, d *time.Duration }{
		{&p.IdleTimeout, &d.IdleTimeout}, {&p.MaxTimeout, &d.MaxTimeout}, {&p.MaxCellTimeout, &d.MaxCellTimeout},
		{&p.MaxCallTimeout, &d.MaxCallTimeout}, {&p.CallbackTimeout, &d.CallbackTimeout},
	} {
		if *f.v == 0 {
			*f.v = *f.d
		}
	}
	if p.DefaultTimeout == 0 {
		p.DefaultTimeout = min(d.DefaultTimeout, p.MaxTimeout)
	}
	for _, f := range []struct{ v, d *int }{
		{&p.MaxSessions, &d.MaxSessions}, {&p.MaxPerClient, &d.MaxPerClient},
		{&p.MaxLLMCalls, &d.MaxLLMCalls}, {&p.MaxToolCalls, &d.MaxToolCalls},
	} {
		if *f.v == 0 {
			*f.v = *f.d
		}
	}
	if p.CallbackMaxBytes == 0 {
		p.CallbackMaxBytes = d.CallbackMaxBytes
	}
	return p
}

// sessionsFile is the [sessions] table's shape (docs/api.md).
type sessionsFile struct {
	IdleTimeout      string   `toml:"idle_timeout"`
	MaxTimeout       string   `toml:"max_timeout"`
	DefaultTimeout   string   `toml:"default_timeout"`
	MaxCellTimeout   string   `toml:"max_cell_timeout"`
	MaxSessions      int      `toml:"max_sessions"`
	MaxPerClient     int      `toml:"max_per_client"`
	MaxLLMCalls      int      `toml:"max_llm_calls"`
	MaxToolCalls     int      `toml:"max_tool_calls"`
	MaxCallTimeout   string   `toml:"max_call_timeout"`
	CallbackTimeout  string   `toml:"callback_timeout"`
	CallbackMaxBytes string   `toml:"callback_max_bytes"`
	CallbackAllow    []string `toml:"callback_allow"`
}

func (f sessionsFile) policy() (SessionPolicy, error) {
	var p SessionPolicy
	for _, d := range []struct {
		key, v string
		into   *time.Duration
	}{
		{"idle_timeout", f.IdleTimeout, &p.IdleTimeout}, {"max_timeout", f.MaxTimeout, &p.MaxTimeout},
		{"default_timeout", f.DefaultTimeout, &p.DefaultTimeout}, {"max_cell_timeout", f.MaxCellTimeout, &p.MaxCellTimeout},
		{"max_call_timeout", f.MaxCallTimeout, &p.MaxCallTimeout}, {"callback_timeout", f.CallbackTimeout, &p.CallbackTimeout},
	} {
		if d.v == "" {
			continue
		}
		v, err := time.ParseDuration(d.v)
		if err != nil || v <= 0 {
			return p, fmt.Errorf("%s %q is not a positive duration (such as 10m)", d.key, d.v)
		}
		*d.into = v
	}
	for _, n := range []struct {
		key string
		v   int
	}{{"max_sessions", f.MaxSessions}, {"max_per_client", f.MaxPerClient}, {"max_llm_calls", f.MaxLLMCalls}, {"max_tool_calls", f.MaxToolCalls}} {
		if n.v < 0 {
			return p, fmt.Errorf("%s %d must be positive", n.key, n.v)
		}
	}
	p.MaxSessions, p.MaxPerClient, p.MaxLLMCalls, p.MaxToolCalls = f.MaxSessions, f.MaxPerClient, f.MaxLLMCalls, f.MaxToolCalls
	if f.CallbackMaxBytes != "" {
		v, err := ParseSize(f.CallbackMaxBytes)
		if err != nil {
			return p, fmt.Errorf("callback_max_bytes: %w", err)
		}
		p.CallbackMaxBytes = v
	}
	for i, e := range f.CallbackAllow {
		c, err := parseCallbackPrefix(e)
		if err != nil {
			return p, fmt.Errorf("callback_allow[%d]: %w", i, err)
		}
		p.CallbackAllow = append(p.CallbackAllow, c)
	}
	p = p.withDefaults()
	if p.DefaultTimeout > p.MaxTimeout {
		return p, errors.New("default_timeout is above max_timeout")
	}
	if p.MaxPerClient > p.MaxSessions {
		return p, errors.New("max_per_client is above max_sessions")
	}
	return p, nil
}
