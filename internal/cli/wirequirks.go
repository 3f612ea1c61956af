package cli

import (
	"flag"
	"fmt"

	"github.com/switchyard-llm/switchyard/internal/vllmpub"
)

// wireQuirkFlags adds the flags that make the simulator's vLLM wire behave
// as other engines do (or break on purpose), for `worker --kv-events-wire
// vllm` and `up --engine-wire vllm`.
func wireQuirkFlags(fs *flag.FlagSet, q *vllmpub.Quirks, arrays *bool, scope string) {
	fs.BoolVar(arrays, "kv-events-array", false, scope+": send events as tagged arrays, as vLLM before 0.26 and SGLang do")
	fs.BoolVar(&q.ParentZero, "kv-events-parent-zero", false, scope+": write a request's first block with parent_block_hash 0, not nil (legal; seen from vLLM-compatible engines)")
	fs.Uint64Var(&q.FirstSeq, "kv-events-first-seq", 0, scope+": number the engine's batches from `N` (vLLM: 0; legal)")
	fs.IntVar(&q.BatchEvents, "kv-events-batch", 0, scope+": hold events until `N` have accumulated, one batch each (0: one batch per scheduler step, as vLLM; legal)")
	fs.Float64Var(&q.DropEvents, "kv-events-drop", 0, scope+": never publish this `share` (0-1) of events, with no sequence gap (broken on purpose: the index goes blind)")
	fs.BoolVar(&q.SkipRemovals, "kv-events-skip-removals", false, scope+": never publish BlockRemoved (broken on purpose: the index goes stale)")
}

// checkWireQuirks rejects quirks out of range, and quirks given without the
// vLLM wire they change.
func checkWireQuirks(q vllmpub.Quirks, arrays, wire bool, wireFlag string) error {
	if !wire && (q != vllmpub.Quirks{} || arrays) {
		return fmt.Errorf("--kv-events-array/-parent-zero/-first-seq/-batch/-drop/-skip-removals change the simulator's vLLM wire: add %s vllm", wireFlag)
	}
	if err := q.Validate(); err != nil {
		return fmt.Errorf("--kv-events-*: %w", err)
	}
	return nil
}
