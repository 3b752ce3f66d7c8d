package bench

import (
	"context"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/tracing"
)

// AgentName is gen_ai.agent.name of bench's agent sessions.
const AgentName = "tokentrace-bench"

// AgentSpans records agent sessions as the GenAI conventions' agent spans
// (tracing.GenAISemconvVersion): one invoke_agent span per session, the
// parent of its steps' inference spans (the client's "chat MODEL" spans,
// Client.Trace) and of one execute_tool span per tool call.
type AgentSpans struct {
	Tracer trace.Tracer
	// Epoch is the wall-clock instant of the run clock's zero.
	Epoch time.Time
	// RunID is gen_ai.agent.id; a session's gen_ai.conversation.id is
	// "RUNID-sSESSION".
	RunID string
	// Model is gen_ai.request.model.
	Model string
}

func (a *AgentSpans) at(ns int64) time.Time { return a.Epoch.Add(time.Duration(ns)) }

func (a *AgentSpans) conversation(session int64) string {
	return a.RunID + "-s" + strconv.FormatInt(session, 10)
}

// session starts a session's invoke_agent span at the run-clock instant
// startNS; ctx then carries it. end ends it at endNS, failed by the
// error kind of the step that ended the session ("" for none).
func (a *AgentSpans) session(ctx context.Context, session int64, startNS int64) (context.Context, func(endNS int64, errorKind latency.ErrorKind)) {
	ctx, sp := a.Tracer.Start(ctx, tracing.SpanName(tracing.OpInvokeAgent, AgentName),
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithTimestamp(a.at(startNS)),
		trace.WithAttributes(attribute.String(tracing.AttrOperation, tracing.OpInvokeAgent),
			attribute.String(tracing.AttrProvider, genAIProvider),
			attribute.String(tracing.AttrAgentName, AgentName), attribute.String(tracing.AttrAgentID, a.RunID),
			attribute.String(tracing.AttrConversationID, a.conversation(session)),
			attribute.String(tracing.AttrRequestModel, a.Model)))
	return ctx, func(endNS int64, errorKind latency.ErrorKind) {
		if errorKind != "" {
			sp.SetAttributes(attribute.String(tracing.AttrErrorType, string(errorKind)))
			sp.SetStatus(codes.Error, string(errorKind))
		}
		sp.End(trace.WithTimestamp(a.at(endNS)))
	}
}

// tools records a step's tool calls as execute_tool spans, children of
// the session's span in ctx, at the instants the calls were made; a
// call's gen_ai.tool.call.id is "CONVERSATION-STEP-CALL" (CALL 0-based in
// the order the step asked), its gen_ai.tool.type "function" (bench, the
// client, makes the call the model's answer asked for).
func (a *AgentSpans) tools(ctx context.Context, session int64, step int, calls []latency.ToolSpan) {
	for i, c := range calls {
		_, sp := a.Tracer.Start(ctx, tracing.SpanName(tracing.OpExecuteTool, c.Name),
			trace.WithSpanKind(trace.SpanKindInternal), trace.WithTimestamp(a.at(c.StartNS)),
			trace.WithAttributes(attribute.String(tracing.AttrOperation, tracing.OpExecuteTool),
				attribute.String(tracing.AttrToolName, c.Name),
				attribute.String(tracing.AttrToolType, tracing.ToolTypeFunction),
				attribute.String(tracing.AttrToolCallID, a.conversation(session)+"-"+strconv.Itoa(step)+"-"+strconv.Itoa(i))))
		if c.ErrorKind != "" {
			sp.SetAttributes(attribute.String(tracing.AttrErrorType, string(c.ErrorKind)))
			sp.SetStatus(codes.Error, c.Error)
		}
		sp.End(trace.WithTimestamp(a.at(c.EndNS)))
	}
}
