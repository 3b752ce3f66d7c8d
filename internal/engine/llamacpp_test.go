package engine

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The llamacpp family schedules as llama-server's update_slots (llama.cpp
// 81ff7abe5, tools/server/server-context.cpp): each iteration's batch
// takes first the one decode token of every generating slot, then prompt
// tokens of the slots that started, until -b (2,048) tokens; a prompt that
// does not fit is continued in the next iteration; a request takes a free
// slot only between iterations (server-queue.cpp start_loop launches the
// queued tasks, then runs update_slots), and waits while all -np (4)
// slots are busy. Hand-worked with the family's limits: three slots
// decoding and a 3,000-token prompt arriving → 3 decodes + 2,045 prompt
// tokens, then 3 decodes + the prompt's last 955 (its first token at that
// step's end); a fifth request waits while the four slots are busy and
// takes the long one's slot in the step after its last token.
func TestLlamaCppFamilyScheduleIsUpdateSlots(t *testing.T) {
	fam, err := LookupFamily("llamacpp")
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.MaxNumBatchedTokens, cfg.MaxNumSeqs = fam.BatchLimits(0)
	cfg.DisableChunkedPrefill = !fam.Scheduler.EnableChunkedPrefill
	cfg.NumBlocks, cfg.MaxModelLen = 1024, 4096
	if cfg.MaxNumBatchedTokens != 2048 || cfg.MaxNumSeqs != 4 || fam.Scheduler.UBatch != 512 {
		t.Fatalf("the family's -b, -np and -ub are %d, %d, %d; llama-server's are 2048, 4, 512",
			cfg.MaxNumBatchedTokens, cfg.MaxNumSeqs, fam.Scheduler.UBatch)
	}
	s := newTestScheduler(t, cfg)
	for _, id := range []string{"a", "b", "c"} {
		submit(s, id, 10, 20, 0)
	}
	var plans [][]string
	plan, now := step(t, s, 0) // the three prompts, whole, in one iteration
	plans = append(plans, plan)
	long := submit(s, "long", 3000, 4, now)
	for range 2 {
		plan, now = step(t, s, now)
		plans = append(plans, plan)
	}
	if long.firstTok != now {
		t.Errorf("the long prompt's first token at %d, want the end of its second step (%d)", long.firstTok, now)
	}
	submit(s, "fifth", 10, 4, now) // all four slots busy: it waits
	for range 4 {
		plan, now = step(t, s, now)
		plans = append(plans, plan)
	}
	want := [][]string{
		{"a:p10", "b:p10", "c:p10"},
		{"a:d1", "b:d1", "c:d1", "long:p2045"},
		{"a:d1", "b:d1", "c:d1", "long:p955"},
		{"a:d1", "b:d1", "c:d1", "long:d1"},
		{"a:d1", "b:d1", "c:d1", "long:d1"},
		{"a:d1", "b:d1", "c:d1", "long:d1"}, // long's fourth token: its slot is free after this step
		{"a:d1", "b:d1", "c:d1", "fifth:p10"},
	}
	if diff := cmp.Diff(want, plans); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
}
