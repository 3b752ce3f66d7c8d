package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/tokentrace/tokentrace/internal/httplimit"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/process"
	"github.com/tokentrace/tokentrace/internal/scrape"
)

// What a sweep does to the server before each cell (--between-cells).
const (
	BetweenCellsReset = "reset" // empty the prefix cache where the engine offers a way
	BetweenCellsNone  = "none"
)

// cellPrepTimeout bounds each reset request and the --between-cells-cmd hook.
const cellPrepTimeout = 60 * time.Second

// cellPrep readies the server before each sweep cell: it empties the
// engine's prefix cache (docs/bench.md, "Between cells") and runs the
// user's hook.
type cellPrep struct {
	target Target
	engine string
	mode   string
	cmd    string
	hc     *http.Client
	n      int    // cells readied so far
	prev   string // the previous cell's phase ("" before the first)
}

// cellPrep is what the sweep does between cells; nil when nothing.
func (r *run) cellPrep() *cellPrep {
	mode := r.cfg.BetweenCells
	if mode == "" {
		mode = BetweenCellsReset
	}
	if mode == BetweenCellsNone && r.cfg.BetweenCellsCmd == "" {
		return nil
	}
	c := &cellPrep{target: r.target, mode: mode, cmd: r.cfg.BetweenCellsCmd, hc: &http.Client{Timeout: cellPrepTimeout, CheckRedirect: httplimit.NoRedirects}}
	if r.sum.Evidence != nil {
		c.engine = r.sum.Evidence.Engine
	}
	return c
}

// before readies the server for the next cell (phase) and says what it
// did; warn is what failed ("" when nothing did). The cell runs either way.
func (c *cellPrep) before(ctx context.Context, phase string) (did, warn string) {
	c.n++
	defer func() { c.prev = phase }()
	var dids, warns []string
	if c.mode != BetweenCellsNone {
		d, err := c.reset(ctx)
		if d != "" {
			dids = append(dids, d)
		}
		if err != nil {
			warns = append(warns, err.Error())
		}
	}
	if c.cmd != "" {
		if err := c.hook(ctx, phase); err != nil {
			warns = append(warns, err.Error())
		} else {
			dids = append(dids, "ran --between-cells-cmd")
		}
	}
	return strings.Join(dids, "; "), strings.Join(warns, "; ")
}

// reset empties the engine's prefix cache: vLLM's and tokentrace serve's
// POST /reset_prefix_cache, SGLang's POST /flush_cache, llama.cpp's slot
// erase for each of its slots.
func (c *cellPrep) reset(ctx context.Context) (string, error) {
	switch c.engine {
	case latency.EngineVLLM, latency.EngineTokentrace:
		return "prefix cache reset (POST /reset_prefix_cache)", c.post(ctx, "/reset_prefix_cache", "")
	case "sglang":
		return "prefix cache flushed (POST /flush_cache)", c.post(ctx, "/flush_cache", "")
	case latency.EngineLlamaCpp:
		n, err := c.eraseSlots(ctx)
		return fmt.Sprintf("%d llama.cpp slot(s) erased (POST /slots/{id}?action=erase)", n), err
	case "":
		return "", fmt.Errorf("prefix cache not reset: the engine was not detected")
	}
	return "", fmt.Errorf("prefix cache not reset: %s offers no way tokentrace knows", c.engine)
}

func (c *cellPrep) post(ctx context.Context, path, query string) error {
	u, err := scrape.RootURL(c.target.BaseURL, path)
	if err != nil {
		return err
	}
	if query != "" {
		u += "?" + query
	}
	ctx, cancel := context.WithTimeout(ctx, cellPrepTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return err
	}
	c.target.authorize(req.Header)
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("POST %s: %w", path, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s: status %d", path, resp.StatusCode)
	}
	return nil
}

// eraseSlots erases each slot GET /slots lists; the number erased.
func (c *cellPrep) eraseSlots(ctx context.Context) (int, error) {
	u, err := scrape.RootURL(c.target.BaseURL, "/slots")
	if err != nil {
		return 0, err
	}
	header := http.Header{}
	c.target.authorize(header)
	pctx, cancel := context.WithTimeout(ctx, cellPrepTimeout)
	defer cancel()
	b, _ := probe(pctx, c.hc, u, header)
	var slots []struct {
		ID int `json:"id"`
	}
	if b == nil || json.Unmarshal(b, &slots) != nil {
		return 0, fmt.Errorf("llama.cpp slots not erased: GET /slots gave no slot list (the server needs --slots)")
	}
	for i, s := range slots {
		if err := c.post(ctx, fmt.Sprintf("/slots/%d", s.ID), "action=erase"); err != nil {
			return i, err
		}
	}
	return len(slots), nil
}

// hook runs --between-cells-cmd through sh, bounded by cellPrepTimeout,
// with the cells in its environment: TOKENTRACE_CELL (the next cell's
// phase), TOKENTRACE_CELL_INDEX (from 1) and TOKENTRACE_PREV_CELL (the
// cell just ended, empty before the first), so that a hook can stop a
// profiler for one cell and start it for the next.
func (c *cellPrep) hook(ctx context.Context, phase string) error {
	ctx, cancel := context.WithTimeout(ctx, cellPrepTimeout)
	defer cancel()
	cmd := process.CommandGroup(ctx, "sh", "-c", c.cmd)
	cmd.Env = append(os.Environ(), "TOKENTRACE_CELL="+phase, fmt.Sprintf("TOKENTRACE_CELL_INDEX=%d", c.n),
		"TOKENTRACE_PREV_CELL="+c.prev)
	out, err := process.CombinedOutput(cmd)
	if err != nil {
		tail := strings.TrimSpace(string(out))
		if len(tail) > 200 {
			tail = "…" + tail[len(tail)-200:]
		}
		return fmt.Errorf("--between-cells-cmd failed: %w (%s)", err, tail)
	}
	return nil
}

// writeBeforeCells is the summary's line on what was done before the
// sweep's cells, and one line per cell where it failed.
func writeBeforeCells(w io.Writer, points []SweepPoint) {
	did := map[string]int{}
	var order []string
	for _, p := range points {
		if p.BeforeCell == "" {
			continue
		}
		if did[p.BeforeCell] == 0 {
			order = append(order, p.BeforeCell)
		}
		did[p.BeforeCell]++
	}
	for _, d := range order {
		fmt.Fprintf(w, "between   %s before %d of %d cells\n", d, did[d], len(points))
	}
	for _, p := range points {
		if p.BeforeCellWarning != "" {
			fmt.Fprintf(w, "warning   before %s: %s\n", p.Phase, p.BeforeCellWarning)
		}
	}
}
