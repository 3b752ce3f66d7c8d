package bench

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tokentrace/tokentrace/internal/serve"
	"github.com/tokentrace/tokentrace/internal/tracing"
	"github.com/tokentrace/tokentrace/internal/tracing/otlptest"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// An agent session reaches an OTLP receiver as the GenAI conventions'
// agent spans: one invoke_agent span, the root of the session's trace,
// whose children are its steps' chat spans and one execute_tool span per
// tool call, each named and attributed as the conventions say and placed
// at the instants the records hold.
func TestAgentSessionSpansOverOTLP(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the embedded engine")
	}
	const model = "agent-model"
	srv := startSim(t, func(o *serve.Options) { o.ServedModelName = model })
	rcv := otlptest.NewReceiver(t)
	tp, err := tracing.NewProvider(context.Background(), rcv.URL(), "tokentrace-bench")
	if err != nil {
		t.Fatal(err)
	}
	o := workload.DefaultOptions()
	o.InputTokens, o.OutputTokens, o.Seed = "32", "2", 3
	o.AgentSteps, o.AgentTools, o.ToolLatency, o.ToolResultTokens = 3, 2, "5ms", "8"
	_, recs := agentRun(t, srv.URL(), o, &ToolTarget{Timeout: 10 * time.Second}, 1, 3, func(c *Config) {
		c.Tracer = tp.Tracer("test")
		c.Target.Model = model
	})
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 {
		t.Fatalf("%d records, want the 3 steps of one session", len(recs))
	}
	spans, bad := rcv.Spans()
	if len(bad) > 0 {
		t.Fatalf("receiver: %q", bad)
	}
	runID := strings.TrimSuffix(recs[0].ID, "-1")
	var agent otlptest.Span
	for _, s := range spans {
		if s.Attrs[tracing.AttrOperation] == tracing.OpInvokeAgent {
			if agent.SpanID != "" {
				t.Fatalf("two invoke_agent spans: %+v and %+v", agent, s)
			}
			agent = s
		}
	}
	want := map[string]any{tracing.AttrOperation: "invoke_agent", tracing.AttrProvider: "tokentrace",
		tracing.AttrAgentName: "tokentrace-bench", tracing.AttrAgentID: runID,
		tracing.AttrConversationID: runID + "-s0", tracing.AttrRequestModel: model}
	if agent.Name != "invoke_agent tokentrace-bench" || agent.Kind != "SPAN_KIND_INTERNAL" || agent.ParentID != "" {
		t.Fatalf("agent span %+v", agent)
	}
	if d := cmp.Diff(want, agent.Attrs); d != "" {
		t.Errorf("invoke_agent attributes (-want +got):\n%s", d)
	}
	// The run clock's zero, from the session's start (its first step's
	// intended instant).
	epoch := agent.Start.Add(-time.Duration(recs[0].IntendedNS))
	at := func(ns int64) time.Time { return epoch.Add(time.Duration(ns)) }
	if last := recs[2]; !agent.End.Equal(at(last.ToolsEnd())) {
		t.Errorf("agent span ends %v, the last step at %v", agent.End, at(last.ToolsEnd()))
	}
	type span struct {
		Name, Kind   string
		Start, End   time.Time
		Attrs        map[string]any
		ParentIsRoot bool
	}
	var wantKids []span
	for _, r := range recs {
		if !r.OK() {
			t.Fatalf("step %d failed: %s %s", r.Turn, r.ErrorKind, r.Error)
		}
		ttft, _ := r.TTFT()
		wantKids = append(wantKids, span{Name: "chat " + model, Kind: "SPAN_KIND_CLIENT", End: at(r.EndNS), ParentIsRoot: true,
			Attrs: map[string]any{tracing.AttrOperation: "chat", tracing.AttrProvider: "tokentrace",
				tracing.AttrRequestModel: model, "tokentrace.request_id": r.ID, "http.response.status_code": int64(200),
				"gen_ai.usage.output_tokens": int64(r.OutputTokens), "tokentrace.ttft": ttft.Seconds()}})
		for i, c := range r.Tools {
			wantKids = append(wantKids, span{Name: "execute_tool " + c.Name, Kind: "SPAN_KIND_INTERNAL",
				Start: at(c.StartNS), End: at(c.EndNS), ParentIsRoot: true,
				Attrs: map[string]any{tracing.AttrOperation: "execute_tool", tracing.AttrToolName: c.Name, tracing.AttrToolType: "function",
					tracing.AttrToolCallID: runID + "-s0-" + strconv.Itoa(r.Turn) + "-" + strconv.Itoa(i)}})
		}
	}
	var kids []span
	for _, s := range spans {
		if s.TraceID != agent.TraceID {
			t.Errorf("span %q in trace %s, the session's is %s", s.Name, s.TraceID, agent.TraceID)
		}
		op := s.Attrs[tracing.AttrOperation]
		if op != tracing.OpChat && op != tracing.OpExecuteTool {
			continue
		}
		k := span{Name: s.Name, Kind: s.Kind, End: s.End, Attrs: s.Attrs, ParentIsRoot: s.ParentID == agent.SpanID}
		if op == tracing.OpExecuteTool {
			k.Start = s.Start
		}
		kids = append(kids, k)
	}
	if len(wantKids) != 3+4 {
		t.Fatalf("records hold %d requests and tool calls, want 3 steps and 2×2 calls", len(wantKids))
	}
	if d := cmp.Diff(wantKids, kids, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); d != "" {
		t.Errorf("the session's children (-want +got):\n%s", d)
	}
	if len(spans) != 1+3+4+3*2 { // and each chat span's connect and send stages
		t.Errorf("%d spans, want 14", len(spans))
	}
}
