package serve

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// TestMetricsExposition: the text format as Prometheus reads it: HELP and
// TYPE lines, label values escaped, histogram buckets cumulative with
// +Inf, _sum and _count.
func TestMetricsExposition(t *testing.T) {
	m := &metrics{}
	c := newCounterVec("x_total", "Things, by kind.\nSecond line.", "kind")
	g := &gauge{name: "x_now", help: "Now."}
	h := newHistogramVec("x_seconds", "Time.", []float64{0.1, 1}, "lang")
	for _, f := range []family{c, g, h} {
		m.add(f)
	}
	c.WithLabelValues(`a"b\c`).Inc()
	c.WithLabelValues(`a"b\c`).Inc()
	c.WithLabelValues("z").Inc()
	g.Inc()
	g.Inc()
	g.Dec()
	for _, v := range []float64{0.05, 0.5, 0.5, 7} {
		h.WithLabelValues("python").Observe(v)
	}
	rec := httptest.NewRecorder()
	m.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	want := `# HELP x_total Things, by kind.\nSecond line.
# TYPE x_total counter
x_total{kind="a\"b\\c"} 2
x_total{kind="z"} 1
# HELP x_now Now.
# TYPE x_now gauge
x_now 1
# HELP x_seconds Time.
# TYPE x_seconds histogram
x_seconds_bucket{lang="python",le="0.1"} 1
x_seconds_bucket{lang="python",le="1"} 3
x_seconds_bucket{lang="python",le="+Inf"} 4
x_seconds_sum{lang="python"} 8.05
x_seconds_count{lang="python"} 4
`
	if got := rec.Body.String(); got != want {
		t.Errorf("exposition:\n%s\nwant:\n%s", got, want)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q", ct)
	}
}
