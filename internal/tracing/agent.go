package tracing

// The GenAI operation names (gen_ai.operation.name) of
// GenAISemconvVersion that tokentrace's spans and metrics carry.
const (
	OpChat           = "chat"
	OpTextCompletion = "text_completion"
	OpInvokeAgent    = "invoke_agent"
	OpExecuteTool    = "execute_tool"
)

// The GenAI attributes of agent and tool spans (GenAISemconvVersion,
// "GenAI agent and framework spans").
const (
	AttrAgentName      = "gen_ai.agent.name"
	AttrAgentID        = "gen_ai.agent.id"
	AttrConversationID = "gen_ai.conversation.id"
	AttrToolName       = "gen_ai.tool.name"
	AttrToolCallID     = "gen_ai.tool.call.id"
	AttrToolType       = "gen_ai.tool.type"
)

// ToolTypeFunction is gen_ai.tool.type of a tool the client executes: the
// model gives the parameters, the client runs the call (the conventions'
// "function", as opposed to an "extension" the agent's side executes, or
// a "datastore").
const ToolTypeFunction = "function"

// SpanName is a GenAI span's name as the conventions give it: the
// operation, then what it acts on (the model of an inference span, the
// agent of invoke_agent, the tool of execute_tool) when known: "chat m",
// "invoke_agent tokentrace-bench", "execute_tool search".
func SpanName(op, target string) string {
	if target == "" {
		return op
	}
	return op + " " + target
}
