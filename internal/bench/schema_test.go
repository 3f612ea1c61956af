package bench

import (
	"encoding/json"
	"os"
	"testing"
)

// checkRequired verifies that v has every field the JSON Schema in
// docs/bench.schema.json marks required, at the top level, in each run, its
// aggregate and each record: the doc and the code cannot drift apart.
func checkRequired(t *testing.T, report []byte) {
	t.Helper()
	b, err := os.ReadFile("../../docs/bench.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Required []string
		Defs     map[string]struct{ Required []string } `json:"$defs"`
	}
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	var rep map[string]any
	if err := json.Unmarshal(report, &rep); err != nil {
		t.Fatal(err)
	}
	has := func(where string, obj any, keys []string) {
		m, ok := obj.(map[string]any)
		if !ok {
			t.Fatalf("%s is not an object", where)
		}
		for _, k := range keys {
			if _, ok := m[k]; !ok {
				t.Errorf("%s lacks required field %q", where, k)
			}
		}
	}
	has("report", rep, schema.Required)
	for _, r := range rep["runs"].([]any) {
		has("run", r, schema.Defs["run"].Required)
		run := r.(map[string]any)
		has("aggregate", run["aggregate"], schema.Defs["aggregate"].Required)
		has("ttft", run["aggregate"].(map[string]any)["ttft"], schema.Defs["quantiles"].Required)
		for _, rec := range run["records"].([]any) {
			has("record", rec, schema.Defs["record"].Required)
		}
	}
}
