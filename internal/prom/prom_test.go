package prom

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestRegister(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := Counter("test_things_total", "Things.")
	v := CounterVec("test_kinds_total", "Kinds.", "kind")
	g := GaugeFunc("test_level", "Level.", func() float64 { return 7 })
	h := Histogram("test_seconds", "Seconds.", []float64{1, 2})
	hv := HistogramVec("test_by_seconds", "Seconds by kind.", []float64{1}, "kind")
	if err := Register(reg, "test", c, v, g, h, hv); err != nil {
		t.Fatalf("Register: %v", err)
	}
	c.Add(3)
	v.WithLabelValues("a").Inc()
	h.Observe(1.5)
	hv.WithLabelValues("b").Observe(0.5)
	want := map[string]string{
		"test_things_total": "counter:3",
		"test_kinds_total":  "counter:1",
		"test_level":        "gauge:7",
		"test_seconds":      "histogram:1",
		"test_by_seconds":   "histogram:1",
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	got := map[string]string{}
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		var v float64
		switch {
		case m.Counter != nil:
			v = m.Counter.GetValue()
		case m.Gauge != nil:
			v = m.Gauge.GetValue()
		case m.Histogram != nil:
			v = float64(m.Histogram.GetSampleCount())
		}
		got[mf.GetName()] = fmt.Sprintf("%s:%g", strings.ToLower(mf.GetType().String()), v)
	}
	if !maps.Equal(got, want) {
		t.Errorf("gathered %v, want %v", got, want)
	}

	// The same name again is refused, and the error names the package.
	err = Register(reg, "other", Counter("test_fresh_total", "Fresh."), Counter("test_things_total", "Things."))
	if err == nil || !strings.HasPrefix(err.Error(), "other: register metrics: ") {
		t.Fatalf("duplicate Register = %v, want an error prefixed %q", err, "other: register metrics: ")
	}
	if !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
		t.Errorf("duplicate Register = %v, want it to wrap AlreadyRegisteredError", err)
	}
}
