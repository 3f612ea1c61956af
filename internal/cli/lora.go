package cli

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/switchyard-llm/switchyard/internal/bus"
	"github.com/switchyard-llm/switchyard/internal/engine/sim"
	"github.com/switchyard-llm/switchyard/internal/fleetconf"
	"github.com/switchyard-llm/switchyard/internal/node"
	"github.com/switchyard-llm/switchyard/internal/tokenizer"
)

// namesFlag is a list of names, given comma-separated or by repeating the
// flag.
type namesFlag []string

func (n *namesFlag) String() string { return strings.Join(*n, ",") }

func (n *namesFlag) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v == "" {
			return fmt.Errorf("empty name in %q", s)
		}
		*n = append(*n, v)
	}
	return nil
}

// adaptersFlag is vLLM's --lora-modules: name=path (or a bare name), comma-
// separated or repeated.
type adaptersFlag []bus.Adapter

func (a *adaptersFlag) String() string {
	var parts []string
	for _, ad := range *a {
		parts = append(parts, ad.Name+"="+ad.Root)
	}
	return strings.Join(parts, ",")
}

func (a *adaptersFlag) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		name, root, _ := strings.Cut(strings.TrimSpace(v), "=")
		if name == "" {
			return fmt.Errorf("%q: want name=path", v)
		}
		*a = append(*a, bus.Adapter{Name: name, Root: root})
	}
	return nil
}

// fleetFlags adds the simulated engine's serving names and LoRA settings,
// as vLLM spells them.
func fleetFlags(fs *flag.FlagSet, c *sim.Config) {
	fs.Var((*namesFlag)(&c.ServedNames), "served-model-name", "sim: names to serve the model under, comma-separated (the first is registered as the model, the rest as aliases; default --model)")
	fs.Var((*adaptersFlag)(&c.Adapters), "lora-modules", "sim: LoRA adapters to serve, name=path, comma-separated or repeated; a request names one as its model")
	fs.IntVar(&c.MaxLoRAs, "max-loras", 1, "sim: LoRA adapters in GPU memory at once; a request for another waits for a slot and pays --lora-swap")
	fs.DurationVar(&c.LoRASwap, "lora-swap", 50*time.Millisecond, "sim: simulated time to load a LoRA adapter into a slot")
}

// loadFleetConfig reads a --config file into per-model settings, opening
// each tokenizer it names (engine: the model's workers tokenize).
func loadFleetConfig(path string) (map[string]node.ModelSettings, error) {
	toks := map[string]tokenizer.Model{}
	f, err := fleetconf.Load(path, func(spec string) error {
		if spec == "engine" {
			return nil
		}
		m, err := openTokenizer(spec)
		if err != nil {
			return err
		}
		toks[spec] = m
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make(map[string]node.ModelSettings, len(f.Models))
	for name, m := range f.Models {
		ms := node.ModelSettings{BlockSize: m.BlockSize, Policy: m.Router.Policy, Alpha: m.Router.Alpha, Disagg: m.Disagg,
			EngineTokenizer: m.Tokenizer == "engine"}
		if t, ok := toks[m.Tokenizer]; ok {
			ms.Tokenizer = t
		}
		out[name] = ms
	}
	return out, nil
}
