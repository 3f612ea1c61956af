// Package prom is the little every Switchyard package needs to define its
// Prometheus metrics: constructors that take a name and a help text (and
// labels or buckets) instead of an options struct, so a package's
// metrics.go reads as the list of its series, and Register, which adds a
// package's collectors to a registry and names the package when one is
// refused.
//
// It holds no state and registers nothing by itself. Naming stays with the
// caller and follows Prometheus conventions
// (switchyard_<subsystem>_<name>_<unit>); metrics that need constant labels
// or scrape-time collectors use client_golang directly.
package prom

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Counter is a counter called name.
func Counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

// CounterVec is a counter called name with the given label names.
func CounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

// GaugeFunc is a gauge called name whose value fn reads at scrape time; fn
// must be safe for concurrent use.
func GaugeFunc(name, help string, fn func() float64) prometheus.GaugeFunc {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, fn)
}

// Histogram is a histogram called name with the given bucket upper bounds.
func Histogram(name, help string, buckets []float64) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
}

// HistogramVec is a histogram called name with the given bucket upper
// bounds and label names.
func HistogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
}

// Register adds cs to reg in order and stops at the first one refused,
// with an error that names pkg, the package whose metrics they are (a
// second frontend on one registry, say, is refused as a duplicate).
// Collectors registered before the refusal stay registered.
func Register(reg prometheus.Registerer, pkg string, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("%s: register metrics: %w", pkg, err)
		}
	}
	return nil
}
