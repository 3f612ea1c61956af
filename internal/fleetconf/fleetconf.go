// Package fleetconf reads the fleet configuration file (--config
// switchyard.yaml): per-model settings for a frontend that serves several
// models. Models the file does not name take the command's flags.
//
// Reading is strict (package yamlconf): an unknown key, a value of the
// wrong type or out of range is refused with the file, line and key. The
// package does not open tokenizers; Load takes a check for them so their
// errors point at the file too.
package fleetconf

import (
	"fmt"
	"slices"

	"github.com/switchyard-llm/switchyard/internal/yamlconf"
)

// Model is one model's settings; zero fields take the flags' values.
type Model struct {
	// Tokenizer is a --tokenizer value for the model's prompts.
	Tokenizer string `yaml:"tokenizer"`
	// BlockSize is the model's KV block size; its workers must use it.
	BlockSize int `yaml:"block_size"`
	// Router overrides the routing policy for the model's requests.
	Router Router `yaml:"router"`
	// Disagg is the disaggregation mode for the model: never, always or
	// auto.
	Disagg string `yaml:"disagg"`
}

// Router is a model's routing policy and kv weight.
type Router struct {
	Policy string  `yaml:"policy"` // kv, round-robin, random or least-loaded
	Alpha  float64 `yaml:"alpha"`  // kv: weight of prefill against decode; 0: the flag's
}

// File is the whole configuration.
type File struct {
	// Models are the per-model settings, by the model's name as its
	// workers register it.
	Models map[string]Model `yaml:"models"`
}

// Policies are the routing policies a file may name.
var Policies = []string{"kv", "round-robin", "random", "least-loaded"}

// Load reads path. checkTokenizer, when not nil, is asked about each
// tokenizer the file names; its error is reported at that key.
func Load(path string, checkTokenizer func(spec string) error) (*File, error) {
	var f File
	yf, err := yamlconf.Load(path, &f)
	if err != nil {
		return nil, err
	}
	models, _ := yamlconf.Value(yf.Root, "models")
	if models == nil || len(f.Models) == 0 {
		return nil, yf.Errorf(yf.Root, "", "models", "no models: name each model with its settings under models:")
	}
	for i := 0; i+1 < len(models.Content); i += 2 {
		name := models.Content[i].Value
		m := f.Models[name]
		node := models.Content[i+1]
		path := "models." + name
		switch {
		case m.BlockSize != 0 && (m.BlockSize < 1 || m.BlockSize > 1024):
			return nil, yf.Errorf(node, path, "block_size", "%d: want 1..1024 (16 is the engines' default)", m.BlockSize)
		case m.Disagg != "" && !slices.Contains([]string{"never", "always", "auto"}, m.Disagg):
			return nil, yf.Errorf(node, path, "disagg", "%q: want never, always or auto", m.Disagg)
		}
		rn, _ := yamlconf.Value(node, "router")
		switch r := m.Router; {
		case r.Policy != "" && !slices.Contains(Policies, r.Policy):
			return nil, yf.Errorf(rn, path+".router", "policy", "%q: want kv, round-robin, random or least-loaded", r.Policy)
		case r.Alpha < 0:
			return nil, yf.Errorf(rn, path+".router", "alpha", "%v must not be negative", r.Alpha)
		}
		if m.Tokenizer != "" && checkTokenizer != nil {
			if err := checkTokenizer(m.Tokenizer); err != nil {
				return nil, yf.Errorf(node, path, "tokenizer", "%v", err)
			}
		}
	}
	return &f, nil
}

// String names the file's models, for start-up logs.
func (f *File) String() string {
	names := make([]string, 0, len(f.Models))
	for n := range f.Models {
		names = append(names, n)
	}
	slices.Sort(names)
	return fmt.Sprint(names)
}
