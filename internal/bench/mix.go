package bench

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
)

// ParseModelMix reads a mix of models, "a:0.7,b:0.3": two or more names,
// each with a positive weight; the weights need not sum to 1. ok is false
// for anything else, which is then one model's name (names may hold a
// colon).
func ParseModelMix(s string) (names []string, weights []float64, ok bool) {
	parts := strings.Split(s, ",")
	if len(parts) < 2 {
		return nil, nil, false
	}
	for _, p := range parts {
		i := strings.LastIndexByte(p, ':')
		if i <= 0 {
			return nil, nil, false
		}
		w, err := strconv.ParseFloat(p[i+1:], 64)
		if err != nil || !(w > 0) || math.IsInf(w, 0) {
			return nil, nil, false
		}
		names, weights = append(names, strings.TrimSpace(p[:i])), append(weights, w)
	}
	return names, weights, true
}

// modelMix draws each request's model by the weights, deterministically:
// request n takes the model whose share of the cumulative weights holds
// the fractional part of n × the golden ratio, which spreads every prefix
// of the run in the weights' proportions. Safe for concurrent use.
type modelMix struct {
	names [][]byte  // JSON-encoded
	cum   []float64 // cumulative shares, the last 1
	n     atomic.Uint64
}

func newModelMix(names []string, weights []float64) *modelMix {
	m := &modelMix{}
	total := 0.0
	for _, w := range weights {
		total += w
	}
	acc := 0.0
	for i, n := range names {
		b, _ := json.Marshal(n)
		m.names = append(m.names, b)
		acc += weights[i] / total
		m.cum = append(m.cum, acc)
	}
	m.cum[len(m.cum)-1] = 1
	return m
}

func (m *modelMix) next() []byte {
	_, f := math.Modf(float64(m.n.Add(1)) * 0.6180339887498949)
	for i, c := range m.cum {
		if f < c {
			return m.names[i]
		}
	}
	return m.names[len(m.names)-1]
}
