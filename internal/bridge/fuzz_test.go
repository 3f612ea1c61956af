package bridge

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/enginewire"
	"github.com/switchyard-llm/switchyard/internal/kvevents"
)

// FuzzDecodeApply feeds arbitrary payloads through decode and rewrite: no
// input may panic the bridge or leave the mirror's two maps inconsistent.
func FuzzDecodeApply(f *testing.F) {
	files, _ := filepath.Glob("../enginewire/testdata/*.msgpack")
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	m := NewMirror(16)
	var b enginewire.Batch
	f.Fuzz(func(t *testing.T, data []byte) {
		if enginewire.DecodeBatch(data, &b) != nil {
			return
		}
		_, _ = m.Apply(&b)
		n := 0
		m.Hashes(func(_ kvevents.Tier, hs []uint64) { n += len(hs) })
		if n > 3*m.Len() {
			t.Fatalf("mirror snapshot has %d hashes for %d engine blocks", n, m.Len())
		}
	})
}
