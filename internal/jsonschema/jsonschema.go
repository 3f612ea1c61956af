// Package jsonschema validates decoded JSON against the small subset of
// JSON Schema that Switchyard's documented report schemas use (type,
// required, properties, additionalProperties, items, enum, const and local
// $ref). It exists so tests at every tier can check real output against the
// published schema without a dependency; it is not a general validator.
package jsonschema

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Validate checks v (as decoded by encoding/json into any) against schema
// and returns every violation with its JSON path; none means valid.
func Validate(schema map[string]any, v any) []string { return validate(schema, schema, v, "$") }

// validate checks v against the subset of JSON Schema that the
// project's schemas use: type (one or a list), required,
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
