package preflight

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/preflight/preflighttest"
)

// validate checks v against the subset of JSON Schema that
// docs/preflight.schema.json uses: type (one or a list), required,
// properties, additionalProperties (false or a schema), items, enum, const
// and local $ref. It returns every violation with its JSON path.
func validate(root, s map[string]any, v any, path string) []string {
	if r, ok := s["$ref"].(string); ok {
		name := strings.TrimPrefix(r, "#/$defs/")
		def, ok := root["$defs"].(map[string]any)[name].(map[string]any)
		if !ok {
			return []string{path + ": unresolved $ref " + r}
		}
		return validate(root, def, v, path)
	}
	var errs []string
	if t, ok := s["type"]; ok {
		var types []string
		switch t := t.(type) {
		case string:
			types = []string{t}
		case []any:
			for _, x := range t {
				types = append(types, x.(string))
			}
		}
		if !slices.Contains(types, jsonType(v)) && !(jsonType(v) == "integer" && slices.Contains(types, "number")) {
			return []string{fmt.Sprintf("%s: type %s, want %v", path, jsonType(v), types)}
		}
	}
	if e, ok := s["enum"].([]any); ok && !slices.Contains(e, v) {
		errs = append(errs, fmt.Sprintf("%s: %v not in enum %v", path, v, e))
	}
	if c, ok := s["const"]; ok && c != v {
		errs = append(errs, fmt.Sprintf("%s: %v, want const %v", path, v, c))
	}
	if obj, ok := v.(map[string]any); ok {
		required, _ := s["required"].([]any)
		for _, r := range required {
			if _, ok := obj[r.(string)]; !ok {
				errs = append(errs, fmt.Sprintf("%s: lacks required %q", path, r))
			}
		}
		props, _ := s["properties"].(map[string]any)
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			switch ps, ap := props[k], s["additionalProperties"]; {
			case ps != nil:
				errs = append(errs, validate(root, ps.(map[string]any), obj[k], path+"."+k)...)
			case ap == false:
				errs = append(errs, fmt.Sprintf("%s: undocumented field %q", path, k))
			case ap != nil:
				errs = append(errs, validate(root, ap.(map[string]any), obj[k], path+"."+k)...)
			}
		}
	}
	if arr, ok := v.([]any); ok {
		if items, ok := s["items"].(map[string]any); ok {
			for i, x := range arr {
				errs = append(errs, validate(root, items, x, fmt.Sprintf("%s[%d]", path, i))...)
			}
		}
	}
	return errs
}

func jsonType(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case float64:
		if v == float64(int64(v)) {
			return "integer"
		}
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

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
			for _, e := range validate(schema, schema, reportJSON(t, rep), "$") {
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
	errs := strings.Join(validate(schema, schema, v, "$"), "\n")
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
