package simulate_test

import (
	"io"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/serve"
	"github.com/tokentrace/tokentrace/internal/simulate"
	"github.com/tokentrace/tokentrace/internal/workload"
	"github.com/tokentrace/tokentrace/internal/workload/workloadtest"
)

// The test: a generated Mooncake trace where half the requests
// share 80 % of their blocks, benched against serve with prefix caching
// (the wall clock, HTTP, serve's tokenizer and cache): the records name
// every request's blocks and the server's cache served the share the
// hash_ids imply; simulate --like of that folder alone shows the same
// cached-token share (within 5 %). Before, --like built prompts from the
// lengths alone and nothing was cached.
func TestLikeReplaysAServedMooncakeRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs bench in real time for about 2 s")
	}
	dir := t.TempDir()
	m := workloadtest.Mooncake{Requests: 100, Blocks: 10, Shared: 8, BlockSize: 64, Output: 4, GapMS: 20}
	wl := workload.DefaultOptions()
	wl.Trace, wl.TraceBlockSize = m.Write(t, dir), m.BlockSize
	given := func(f string) bool { return f == "trace" || f == "trace_block_size" }

	so := serve.DefaultOptions()
	so.Engine.EnablePrefixCaching = true
	bo, _ := benchAgainstServe(t, wl, given, so, filepath.Join(dir, "bench"))
	served, blocks, _ := simulate.CachedShare(t, bo.OutputDir)
	implied := m.ImpliedShare(true)
	t.Logf("served: cached share %.4f (the hash_ids imply %.4f), %d records with blocks", served, implied, blocks)
	if math.Abs(served-implied) > 0.05*implied || blocks != m.Requests {
		t.Fatalf("served: cached share %.4f, the hash_ids imply %.4f; %d of %d records name their blocks", served, implied, blocks, m.Requests)
	}

	lo := simulate.DefaultOptions()
	lo.Engine.EnablePrefixCaching = true
	lo.Like, lo.OutputDir = bo.OutputDir, filepath.Join(dir, "like")
	cfg, out, err := lo.Config(func(string) bool { return false }, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := simulate.WriteRun(cfg, out, io.Discard); err != nil {
		t.Fatal(err)
	}
	got, _, _ := simulate.CachedShare(t, lo.OutputDir)
	t.Logf("simulate --like: cached share %.4f, served %.4f", got, served)
	if math.Abs(got-served) > 0.05*served {
		t.Errorf("simulate --like: cached share %.4f, served %.4f (want within 5 %%)", got, served)
	}
}
