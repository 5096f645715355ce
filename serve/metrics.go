package serve

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// The service's metrics, in Prometheus's text exposition format (version
// 0.0.4, as https://prometheus.io/docs/instrumenting/exposition_formats/
// describes it), written here rather than with client_golang: that
// library's package initialisation cost every rljail start, a one-shot
// run's included, 0.8 to 1.4 ms (GODEBUG=inittrace: 0.84 ms in
// client_golang/prometheus, 0.14 ms in procfs, 0.19 ms in its protobuf
// packages), some 15% of what the jail adds to `python3 -c pass`, for
// the few counters, gauges and one histogram the service keeps.

// metrics is a set of metric families, written in the order added.
type metrics struct {
	mu       sync.Mutex
	families []family
}

type family interface {
	write(w io.Writer)
}

func (m *metrics) add(f family) {
	m.mu.Lock()
	m.families = append(m.families, f)
	m.mu.Unlock()
}

// ServeHTTP writes every family.
func (m *metrics) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	m.mu.Lock()
	fams := append([]family(nil), m.families...)
	m.mu.Unlock()
	for _, f := range fams {
		f.write(w)
	}
}

func header(w io.Writer, name, help, typ string) {
	help = strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(help)
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

// labelString is {k1="v1",k2="v2"} (empty for no labels), the values
// escaped as the format asks.
func labelString(names, values []string, extra ...string) string {
	if len(names) == 0 && len(extra) == 0 {
		return ""
	}
	esc := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	// Sorted by name, as client_golang writes them (a histogram's le last).
	order := make([]int, len(names))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return names[order[a]] < names[order[b]] })
	var b strings.Builder
	b.WriteByte('{')
	for k, i := range order {
		if k > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `%s="%s"`, names[i], esc.Replace(values[i]))
	}
	for i := 0; i+1 < len(extra); i += 2 {
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `%s="%s"`, extra[i], esc.Replace(extra[i+1]))
	}
	b.WriteByte('}')
	return b.String()
}

func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// counterVec is a counter by label values.
type counterVec struct {
	name, help string
	labels     []string
	mu         sync.Mutex
	values     map[string]*counter
}

type counter struct {
	labels []string
	n      atomic.Int64
}

func (c *counter) Inc() { c.n.Add(1) }

func newCounterVec(name, help string, labels ...string) *counterVec {
	return &counterVec{name: name, help: help, labels: labels, values: map[string]*counter{}}
}

// WithLabelValues is the counter of these label values (one per label).
func (v *counterVec) WithLabelValues(values ...string) *counter {
	key := strings.Join(values, "\xff")
	v.mu.Lock()
	defer v.mu.Unlock()
	c := v.values[key]
	if c == nil {
		c = &counter{labels: append([]string(nil), values...)}
		v.values[key] = c
	}
	return c
}

func (v *counterVec) write(w io.Writer) {
	header(w, v.name, v.help, "counter")
	v.mu.Lock()
	keys := make([]string, 0, len(v.values))
	for k := range v.values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		c := v.values[k]
		fmt.Fprintf(w, "%s%s %d\n", v.name, labelString(v.labels, c.labels), c.n.Load())
	}
	v.mu.Unlock()
}

// gauge is a number that goes up and down.
type gauge struct {
	name, help string
	n          atomic.Int64
}

func (g *gauge) Inc() { g.n.Add(1) }
func (g *gauge) Dec() { g.n.Add(-1) }
func (g *gauge) write(w io.Writer) {
	header(w, g.name, g.help, "gauge")
	fmt.Fprintf(w, "%s %d\n", g.name, g.n.Load())
}

// histogramVec is a histogram by label values.
type histogramVec struct {
	name, help string
	labels     []string
	buckets    []float64 // upper bounds, ascending; +Inf is implied
	mu         sync.Mutex
	values     map[string]*histogram
}

type histogram struct {
	labels []string
	counts []uint64 // per bucket, not cumulative
	sum    float64
	count  uint64
}

func newHistogramVec(name, help string, buckets []float64, labels ...string) *histogramVec {
	return &histogramVec{name: name, help: help, labels: labels, buckets: buckets, values: map[string]*histogram{}}
}

// observation is one histogram's: Observe records a value in it.
type observation struct {
	v *histogramVec
	h *histogram
}

func (o observation) Observe(x float64) {
	o.v.mu.Lock()
	defer o.v.mu.Unlock()
	i := sort.SearchFloat64s(o.v.buckets, x) // the first bound >= x
	if i < len(o.h.counts) {
		o.h.counts[i]++
	}
	o.h.sum += x
	o.h.count++
}

// WithLabelValues is the histogram of these label values.
func (v *histogramVec) WithLabelValues(values ...string) observation {
	key := strings.Join(values, "\xff")
	v.mu.Lock()
	defer v.mu.Unlock()
	h := v.values[key]
	if h == nil {
		h = &histogram{labels: append([]string(nil), values...), counts: make([]uint64, len(v.buckets))}
		v.values[key] = h
	}
	return observation{v, h}
}

func (v *histogramVec) write(w io.Writer) {
	header(w, v.name, v.help, "histogram")
	v.mu.Lock()
	defer v.mu.Unlock()
	keys := make([]string, 0, len(v.values))
	for k := range v.values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		h := v.values[k]
		var cum uint64
		for i, le := range v.buckets {
			cum += h.counts[i]
			fmt.Fprintf(w, "%s_bucket%s %d\n", v.name, labelString(v.labels, h.labels, "le", formatFloat(le)), cum)
		}
		fmt.Fprintf(w, "%s_bucket%s %d\n", v.name, labelString(v.labels, h.labels, "le", "+Inf"), h.count)
		fmt.Fprintf(w, "%s_sum%s %s\n", v.name, labelString(v.labels, h.labels), formatFloat(h.sum))
		fmt.Fprintf(w, "%s_count%s %d\n", v.name, labelString(v.labels, h.labels), h.count)
	}
}
