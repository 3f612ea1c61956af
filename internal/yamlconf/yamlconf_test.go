package yamlconf

import (
	"strings"
	"testing"
)

// TestDecodeErrors: each problem names the file, the line and the key.
func TestDecodeErrors(t *testing.T) {
	type cfg struct {
		Name  string `yaml:"name"`
		Items []struct {
			Size int `yaml:"size"`
		} `yaml:"items"`
	}
	tests := []struct{ name, text, want string }{
		{"unknown key", "name: a\nsizes: 3\n", "f.yaml:2: sizes: field sizes not found"},
		{"wrong type", "name: a\nitems:\n  - size: 1\n  - size: big\n", "f.yaml:4: items[1].size: cannot unmarshal"},
		{"not a mapping", "- a\n", "f.yaml:1: the top level must be a mapping"},
		{"syntax", "name: [a\n", "f.yaml:"},
		{"empty", "", "f.yaml: the file is empty"},
		{"two documents", "name: a\n---\nname: b\n", "f.yaml:2: more than one YAML document"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var c cfg
			_, err := Decode("f.yaml", []byte(tc.text), &c)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("got %v, want prefix %q", err, tc.want)
			}
		})
	}
	var c cfg
	f, err := Decode("f.yaml", []byte("name: a\nitems:\n  - size: 1\n"), &c)
	if err != nil || c.Name != "a" || len(c.Items) != 1 {
		t.Fatalf("good file: %+v, %v", c, err)
	}
	items, _ := Value(f.Root, "items")
	if e := f.Errorf(items.Content[0], "items[0]", "size", "too small"); e.Error() != "f.yaml:3: items[0].size: too small" {
		t.Errorf("Errorf: %q", e)
	}
}
