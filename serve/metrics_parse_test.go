package serve

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestMetricsPrometheusParses holds the hand-written exposition (see
// metrics.go for why it is not client_golang) to Prometheus's own text
// parser: the whole server's /metrics, and a histogram and escaped labels
// whose values the parser must read back. A test-only import: the binary
// does not link the parser.
func TestMetricsPrometheusParses(t *testing.T) {
	s := New(Options{Token: "0123456789abcdef0123"})
	s.runs.WithLabelValues("exited", `py"th\on`).Inc()
	s.latency.WithLabelValues("python").Observe(0.3)
	s.latency.WithLabelValues("python").Observe(70)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/metrics", nil)
	req.Header.Set("Authorization", "Bearer 0123456789abcdef0123")
	s.Handler().ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Fatalf("/metrics: %d %s", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q, want Prometheus's text format 0.0.4", ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(rec.Body.String()))
	if err != nil {
		t.Fatalf("Prometheus's parser refuses /metrics: %v\n%s", err, rec.Body)
	}
	runs := fams["rljail_runs_total"]
	if runs == nil || len(runs.Metric) != 1 || runs.Metric[0].GetCounter().GetValue() != 1 {
		t.Fatalf("rljail_runs_total as parsed: %v", runs)
	}
	var lang string
	for _, l := range runs.Metric[0].Label {
		if l.GetName() == "language" {
			lang = l.GetValue()
		}
	}
	if lang != `py"th\on` {
		t.Errorf("label read back as %q", lang)
	}
	h := fams["rljail_run_seconds"]
	if h == nil || len(h.Metric) != 1 {
		t.Fatalf("rljail_run_seconds as parsed: %v", h)
	}
	hist := h.Metric[0].GetHistogram()
	if hist.GetSampleCount() != 2 || hist.GetSampleSum() != 70.3 {
		t.Errorf("histogram count %d sum %v, want 2 and 70.3", hist.GetSampleCount(), hist.GetSampleSum())
	}
	for _, b := range hist.Bucket {
		want := uint64(0)
		for _, v := range []float64{0.3, 70} {
			if v <= b.GetUpperBound() {
				want++
			}
		}
		if b.GetCumulativeCount() != want {
			t.Errorf("bucket le=%v holds %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
		}
	}
	for name, f := range fams {
		if f.GetHelp() == "" {
			t.Errorf("%s has no HELP", name)
		}
	}
}
