package serve

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rljail/rljail/jail"
)

// The warm pool (rljail serve --warm N): per runtime, N jails made ahead
// of their request (jail.PrepareStarted: namespaces, host uid, cgroup,
// mounts, the rootfs checked, and the launcher started as the payload,
// its interpreter up and waiting on the channel: launcher.go), refilled
// in the background as requests take them. A request that fits a waiting
// jail (the runtime's, the server's seccomp program, the /tmp size it was
// made with; no volumes or egress) pays only for handing its request
// over: its command, environment, files and rlimits go to the launcher,
// which runs a Python program in its own child without an interpreter's
// start, and execs anything else; its timeout, CPU time and cgroup limits
// are its own, written into the waiting jail before release. Every other request, and every request while the pool is
// empty or its jail had died, starts one-shot (jail.Run), and the
// response and the metrics say so ("pool": "cold" and why). Each jail
// serves one request and is destroyed after it.

// Pool values of a response and of the metrics.
const (
	poolWarm = "warm"
	poolCold = "cold"
)

// Why a request started cold.
const (
	coldOff    = "no_pool"    // --warm 0
	coldEmpty  = "empty"      // every waiting jail was taken
	coldMisfit = "misfit"     // the request asks what a waiting jail was not made with
	coldDied   = "died"       // the waiting jail had ended, or could not be started
	coldClosed = "draining"   // the pool is closed
	coldNoRT   = "no_runtime" // no pool for the request's runtime
)

// refillBackoff is how long a maker waits after a failed Prepare (a
// rootfs that fails its check, a host out of uids) before it tries again.
const refillBackoff = time.Second

// pool is the server's warm pools, one per runtime.
type pool struct {
	size    int
	log     *slog.Logger
	pools   map[string]*runtimePool
	stop    chan struct{}
	once    sync.Once
	makers  sync.WaitGroup
	refills *counterVec
	failed  *counterVec
	runs    *counterVec
}

// runtimePool is one runtime's waiting jails.
type runtimePool struct {
	name     string
	template jail.Spec
	// slots holds a token per jail of the pool, waiting or being made;
	// ready holds the waiting ones.
	slots chan struct{}
	ready chan *warmJail
	// filled is closed once the pool first had size jails waiting.
	filled     chan struct{}
	fillOnce   sync.Once
	lastFailMu sync.Mutex
	lastFail   string
}

// newPool starts the makers of size jails per runtime of templates;
// size 0 is no pool (every request cold).
func newPool(size int, templates map[string]jail.Spec, log *slog.Logger, reg *metrics) *pool {
	p := &pool{size: size, log: log, pools: map[string]*runtimePool{}, stop: make(chan struct{}),
		refills: newCounterVec("rljail_pool_refills_total", "Jails made ahead of their payload for the warm pool, by runtime.", "runtime"),
		failed:  newCounterVec("rljail_pool_prepare_failures_total", "Jails the warm pool failed to make (or made and found dead), by runtime.", "runtime"),
		runs:    newCounterVec("rljail_pool_runs_total", "Runs by how their jail started: warm (a waiting jail of the pool) or cold (one-shot), and why cold.", "pool", "reason"),
	}
	reg.add(&poolGauge{p: p})
	reg.add(p.refills)
	reg.add(p.failed)
	reg.add(p.runs)
	if size <= 0 {
		return p
	}
	names := make([]string, 0, len(templates))
	for name := range templates {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		rp := &runtimePool{name: name, template: templates[name], slots: make(chan struct{}, size),
			ready: make(chan *warmJail, size), filled: make(chan struct{})}
		p.pools[name] = rp
		// Up to two makers: a 2-CPU host gains nothing from more, and
		// the requests' own jails need the CPUs too.
		for i := 0; i < min(size, 2); i++ {
			p.makers.Add(1)
			go p.maker(rp)
		}
	}
	return p
}

// maker makes jails for rp while it has room, until the pool closes.
func (p *pool) maker(rp *runtimePool) {
	defer p.makers.Done()
	for {
		select {
		case <-p.stop:
			return
		case rp.slots <- struct{}{}:
		}
		pj, err := prepareWarm(rp.template)
		if err != nil {
			<-rp.slots
			p.failed.WithLabelValues(rp.name).Inc()
			rp.lastFailMu.Lock()
			rp.lastFail = err.Error()
			rp.lastFailMu.Unlock()
			if p.log != nil {
				p.log.Warn("warm pool: make a jail", "runtime", rp.name, "error", err.Error())
			}
			select {
			case <-p.stop:
				return
			case <-time.After(refillBackoff):
			}
			continue
		}
		p.refills.WithLabelValues(rp.name).Inc()
		select {
		case <-p.stop:
			pj.destroy()
			<-rp.slots
			return
		case rp.ready <- pj:
		}
		if len(rp.ready) == cap(rp.ready) {
			rp.fillOnce.Do(func() { close(rp.filled) })
		}
	}
}

// take gives a waiting jail that spec fits, or nil and why not. The
// jail's place is refilled at once.
func (p *pool) take(runtime string, spec jail.Spec) (*warmJail, string) {
	if p.size <= 0 {
		return nil, coldOff
	}
	select {
	case <-p.stop:
		return nil, coldClosed
	default:
	}
	rp := p.pools[runtime]
	if rp == nil {
		return nil, coldNoRT
	}
	for {
		var pj *warmJail
		select {
		case pj = <-rp.ready:
		default:
			return nil, coldEmpty
		}
		if !pj.Alive() {
			// Its init ended while it waited (killed from outside, say):
			// discarded and refilled, and the next waiting jail is tried.
			pj.destroy()
			<-rp.slots
			p.failed.WithLabelValues(rp.name).Inc()
			if p.log != nil {
				p.log.Warn("warm pool: a waiting jail had died; discarded", "runtime", rp.name)
			}
			continue
		}
		if err := pj.Fits(spec); err != nil {
			// Back to the pool, its slot still held (so there is room):
			// no payload touched it.
			rp.ready <- pj
			return nil, coldMisfit
		}
		<-rp.slots // a maker makes the next one now
		return pj, ""
	}
}

// ready says why the pool is not ready: a runtime whose pool has not yet
// been filled once.
func (p *pool) notReady() error {
	for _, rp := range p.pools {
		select {
		case <-rp.filled:
		default:
			rp.lastFailMu.Lock()
			why := rp.lastFail
			rp.lastFailMu.Unlock()
			msg := fmt.Sprintf("the warm pool of %s is not filled yet (%d of %d jails waiting)", rp.name, len(rp.ready), p.size)
			if why != "" {
				msg += "; its last jail failed: " + why
			}
			return errors.New(msg)
		}
	}
	return nil
}

// close stops the makers and destroys every waiting jail: when it
// returns, nothing of the pool is left (processes, cgroups, mounts, host
// uids' locks).
func (p *pool) close() {
	p.once.Do(func() {
		close(p.stop)
		p.makers.Wait()
		for _, rp := range p.pools {
			for {
				select {
				case pj := <-rp.ready:
					pj.destroy()
					<-rp.slots
					continue
				default:
				}
				break
			}
		}
	})
}

// poolGauge writes rljail_pool_ready: the jails waiting per runtime.
type poolGauge struct{ p *pool }

func (g *poolGauge) write(w io.Writer) {
	header(w, "rljail_pool_ready", "Jails of the warm pool waiting for a request, by runtime.", "gauge")
	names := make([]string, 0, len(g.p.pools))
	for name := range g.p.pools {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(w, "rljail_pool_ready%s %d\n", labelString([]string{"runtime"}, []string{name}), len(g.p.pools[name].ready))
	}
}

// warmJail is a jail of the pool: its launcher started ahead, and the
// server's end of its channel.
type warmJail struct {
	*jail.Prepared
	ch *os.File
}

// prepareWarm makes a jail of t with the launcher started ahead.
func prepareWarm(t jail.Spec) (*warmJail, error) {
	host, inJail, err := channelPair()
	if err != nil {
		return nil, err
	}
	t.Command, t.Channel = launcherAheadCommand(), inJail
	// Room for the request's environment, which the launcher writes
	// over its own where it runs the program itself (retitle).
	t.Env = append(append([]string(nil), t.Env...), launcherRoom())
	pj, err := jail.PrepareStarted(t)
	inJail.Close()
	if err != nil {
		host.Close()
		return nil, err
	}
	return &warmJail{pj, host}, nil
}

// launcherRoom is the entry of the launcher's environment that holds the
// room (launcher.py: retitle), never a request's; made where a jail of the
// pool is, not at every run's package init.
func launcherRoom() string { return "RLJAIL_LAUNCHER_ROOM=" + strings.Repeat(".", 8192) }

// destroy ends a waiting jail and closes its channel.
func (w *warmJail) destroy() {
	w.Destroy()
	w.ch.Close()
}

// poolTemplates are the specs the pool makes its jails for: a request's
// with the server's default limits, per runtime.
func (s *Server) poolTemplates() map[string]jail.Spec {
	t := map[string]jail.Spec{}
	if s.opts.Warm <= 0 {
		return t
	}
	for name, rt := range s.opts.Runtimes {
		// The longest timeout a request may ask: the launcher's rlimits
		// (RLIMIT_CPU follows the timeout) are the most a request's can be.
		j := &job{runtime: rt, timeout: s.conf().MaxTimeout, memory: s.conf().DefaultMemory}
		t[name] = s.jobSpec(j)
	}
	return t
}
