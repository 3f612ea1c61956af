package preflight

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/jsonschema"
	"github.com/switchyard-llm/switchyard/internal/preflight/preflighttest"
)

func loadSchema(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile("../../docs/preflight.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("schema is not JSON: %v", err)
	}
	return s
}

func reportJSON(t *testing.T, rep *Report) any {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteJSON(&buf, rep); err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(buf.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestJSONMatchesSchema runs deployments that exercise every detail type
// (passing, failing, disaggregated) and validates each report.
func TestJSONMatchesSchema(t *testing.T) {
	schema := loadSchema(t)
	deployments := map[string]preflighttest.Config{
		"aggregated with a disabled worker": {Workers: []preflighttest.Worker{{ID: "w1"}, {ID: "w2", Events: "disabled"}},
			Refused: [][2]string{{"w3", "model mismatch"}}},
		"disaggregated on 1 GbE":     gbeDeployment(1.19e8, "always"),
		"link probe fails (no link)": {Workers: []preflighttest.Worker{{ID: "p1", Role: "prefill"}, {ID: "d1", Role: "decode"}}},
	}
	for name, d := range deployments {
		t.Run(name, func(t *testing.T) {
			f := preflighttest.New(t, d)
			cfg := testConfig(f.URL)
			cfg.EventsDeadline = 300 * time.Millisecond
			rep, _ := run(t, cfg)
			for _, e := range jsonschema.Validate(schema, reportJSON(t, rep)) {
				t.Error(e)
			}
		})
	}
}

// TestValidatorCatchesDrift proves the validator can fail: a report with a
// wrong type, a missing required field and an undocumented field.
func TestValidatorCatchesDrift(t *testing.T) {
	schema := loadSchema(t)
	f := preflighttest.New(t, preflighttest.Config{Workers: twoWorkers()})
	rep, _ := run(t, testConfig(f.URL))
	v := reportJSON(t, rep).(map[string]any)
	v["verdict"] = "MAYBE"
	delete(v, "url")
	v["checks"].([]any)[0].(map[string]any)["extra"] = 1
	v["duration_s"] = "slow"
	errs := strings.Join(jsonschema.Validate(schema, v), "\n")
	for _, want := range []string{`$.verdict: MAYBE not in enum`, `$: lacks required "url"`, `$.checks[0]: undocumented field "extra"`, `$.duration_s: type string`} {
		if !strings.Contains(errs, want) {
			t.Errorf("validator missed %q; got:\n%s", want, errs)
		}
	}
}

func TestMarkdownReport(t *testing.T) {
	f := preflighttest.New(t, gbeDeployment(1.19e8, "auto"))
	rep, _ := run(t, testConfig(f.URL))
	var md bytes.Buffer
	if err := WriteMarkdown(&md, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# Switchyard preflight: PASS", "| check | result | summary |", "## Disaggregation p1→d1",
		"| 3,000 | 344.1 | 2.89 s |", "recommended --disagg never"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
}
