package openai

// ScanChunk's readers of the Responses, Messages and Ollama objects
// (apiFields), and their resolution into ChunkInfo.

// elements reads an array at depth, calling elem for each element (which
// must read it); a value that is no array is a shape error (null is
// none).
func (cs *chunkScan) elements(depth int, elem func() error) error {
	s := &cs.s
	switch s.Peek() {
	case 'n':
		if s.Null() {
			return nil
		}
	case '[':
		_ = s.Expect('[') // Peek saw it
		for first := true; ; first = false {
			more, err := s.Element(first)
			if !more || err != nil {
				return err
			}
			if err := elem(); err != nil {
				return err
			}
		}
	}
	return cs.mismatch(depth)
}

// flag reads a boolean (null: false).
func (cs *chunkScan) flag(dst *bool, depth int) error {
	s := &cs.s
	*dst = false
	switch s.Peek() {
	case 'n':
		if s.Null() {
			return nil
		}
	case 't', 'f':
		v, err := s.Bool()
		*dst = v
		return err
	}
	return cs.mismatch(depth)
}

// apiDelta reads a top-level "delta": Responses' string, or Messages'
// object (content_block_delta's text_delta, thinking_delta,
// input_json_delta; message_delta's stop_reason).
func (cs *chunkScan) apiDelta() error {
	a := &cs.api
	if cs.s.Peek() == '"' {
		var err error
		a.delta, err = cs.str(1)
		return err
	}
	if ok, err := cs.object(1); !ok {
		return err
	}
	for first := true; ; first = false {
		k, more, err := cs.member(first)
		if !more || err != nil {
			return err
		}
		switch string(k) {
		case "type":
			a.dType, err = cs.str(2)
		case "text":
			a.dText, err = cs.str(2)
		case "thinking":
			a.dThinking, err = cs.str(2)
		case "partial_json":
			var pj []byte
			pj, err = cs.str(2)
			a.tools = a.tools || len(pj) > 0
		case "stop_reason":
			a.stopReason, err = cs.str(2)
		default:
			err = cs.skip(2)
		}
		if err != nil {
			return err
		}
	}
}

// apiMessage reads a top-level "message": Ollama's message (content and
// thinking strings, tool_calls), Messages' message_start (its usage), or
// the message string of Responses' error event.
func (cs *chunkScan) apiMessage() error {
	a := &cs.api
	if cs.s.Peek() == '"' {
		var err error
		a.errMessage, err = cs.str(1)
		return err
	}
	if ok, err := cs.object(1); !ok {
		return err
	}
	for first := true; ; first = false {
		k, more, err := cs.member(first)
		if !more || err != nil {
			return err
		}
		switch string(k) {
		case "content":
			if cs.s.Peek() == '"' {
				a.text, err = cs.str(2)
			} else {
				err = cs.skip(2)
			}
		case "thinking":
			a.reasoning, err = cs.str(2)
		case "usage":
			err = cs.usageAt(2)
		case "tool_calls":
			var tools bool
			tools, err = cs.toolCalls()
			a.tools = a.tools || tools
		default:
			err = cs.skip(2)
		}
		if err != nil {
			return err
		}
	}
}

// apiResponse reads the "response" of a Responses stream event: its
// usage, status, incomplete_details, error and metrics (its output is the
// deltas' text again: not read).
func (cs *chunkScan) apiResponse() error {
	a := &cs.api
	if ok, err := cs.object(1); !ok {
		return err
	}
	for first := true; ; first = false {
		k, more, err := cs.member(first)
		if !more || err != nil {
			return err
		}
		switch string(k) {
		case "usage":
			err = cs.usageAt(2)
		case "status":
			a.status, err = cs.str(2)
		case "incomplete_details":
			err = cs.incomplete(2)
		case "error":
			a.respError, err = cs.value(2)
		case "metrics":
			cs.c.Metrics, err = cs.value(2)
		default:
			err = cs.skip(2)
		}
		if err != nil {
			return err
		}
	}
}

// incomplete reads incomplete_details' reason.
func (cs *chunkScan) incomplete(depth int) error {
	if ok, err := cs.object(depth); !ok {
		return err
	}
	for first := true; ; first = false {
		k, more, err := cs.member(first)
		if !more || err != nil {
			return err
		}
		if string(k) == "reason" {
			cs.api.incomplete, err = cs.str(depth + 1)
		} else {
			err = cs.skip(depth + 1)
		}
		if err != nil {
			return err
		}
	}
}

// blocks reads an array of content blocks or parts at depth: "text"
// (Messages' text block, Responses' output_text part) into a.text,
// "thinking" (Messages' thinking block) and a reasoning_text part's
// text into a.reasoning, a tool_use or function_call as tools; the first
// non-empty of each is kept (only emptiness matters to a classifier).
func (cs *chunkScan) blocks(depth int, a *apiFields) error {
	return cs.elements(depth, func() error { return cs.block(depth+1, a) })
}

// block reads one element of blocks.
func (cs *chunkScan) block(depth int, a *apiFields) error {
	var typ, text, thinking []byte
	err := cs.blockMembers(depth, &typ, &text, &thinking)
	switch string(typ) {
	case "reasoning_text", "summary_text":
		thinking, text = text, nil
	case "tool_use":
		a.tools = true
	}
	if len(a.text) == 0 {
		a.text = text
	}
	if len(a.reasoning) == 0 {
		a.reasoning = thinking
	}
	return err
}

// blockMembers reads a block's type, text and thinking.
func (cs *chunkScan) blockMembers(depth int, typ, text, thinking *[]byte) error {
	if ok, err := cs.object(depth); !ok {
		return err
	}
	for first := true; ; first = false {
		k, more, err := cs.member(first)
		if !more || err != nil {
			return err
		}
		switch string(k) {
		case "type":
			*typ, err = cs.str(depth + 1)
		case "text":
			*text, err = cs.str(depth + 1)
		case "thinking":
			*thinking, err = cs.str(depth + 1)
		default:
			err = cs.skip(depth + 1)
		}
		if err != nil {
			return err
		}
	}
}

// outputItems reads a whole Response's "output": message items' content
// parts as text, reasoning items' content (and summary) as reasoning,
// function calls as tools.
func (cs *chunkScan) outputItems() error {
	return cs.elements(1, cs.outputItem)
}

// outputItem reads one element of outputItems.
func (cs *chunkScan) outputItem() error {
	a := &cs.api
	var typ []byte
	var item apiFields
	err := cs.itemMembers(&typ, &item)
	switch string(typ) {
	case "message":
		if len(a.text) == 0 {
			a.text = item.text
		}
	case "reasoning":
		if len(a.reasoning) == 0 {
			a.reasoning = item.reasoning
		}
		if len(a.reasoning) == 0 {
			a.reasoning = item.text
		}
	case "function_call":
		a.tools = true
	}
	return err
}

// itemMembers reads an output item's type and its content and summary
// blocks into item.
func (cs *chunkScan) itemMembers(typ *[]byte, item *apiFields) error {
	if ok, err := cs.object(2); !ok {
		return err
	}
	for first := true; ; first = false {
		k, more, err := cs.member(first)
		if !more || err != nil {
			return err
		}
		switch string(k) {
		case "type":
			*typ, err = cs.str(3)
		case "content", "summary":
			err = cs.blocks(3, item)
		default:
			err = cs.skip(3)
		}
		if err != nil {
			return err
		}
	}
}

// Finish reasons the typed APIs' own reasons map to.
var (
	finishStop   = []byte(FinishStop)
	finishLength = []byte(FinishLength)
	finishTools  = []byte("tool_calls")
)

// resolve sets ChunkInfo's output, finish, usage, end and error from the
// Responses, Messages and Ollama members read; b is the whole object.
func (cs *chunkScan) resolve(b []byte) {
	c, a := cs.c, &cs.api
	c.Native = a.hasDone && !c.Typed
	if a.hasIn {
		c.PromptTokens, c.HasPrompt, c.HasUsage = a.in+a.cacheRead+a.cacheCreate, true, true
		if a.cacheRead > 0 {
			c.CachedTokens = a.cacheRead
		}
	}
	if a.hasOut {
		c.CompletionTokens, c.HasCompletion, c.HasUsage = a.out, true, true
	}
	switch {
	case c.Typed:
		cs.resolveTyped(b)
	case c.Native:
		c.Content, c.Reasoning = a.text, a.reasoning
		c.End = a.done
		if a.done {
			c.Finish, c.HasFinish = a.doneReason, a.doneReason != nil
		}
		c.HasUsage = c.HasUsage && a.done
	case a.status != nil: // a whole Response
		c.Content, c.Reasoning = a.text, a.reasoning
		cs.responseFinish()
		if string(a.status) == "failed" && c.Error == nil {
			c.Error = a.respError
		}
	default:
		return
	}
	if len(c.Content) > 0 || len(c.Reasoning) > 0 || a.tools {
		c.Output = true
	}
}

// resolveTyped resolves a Responses or Messages event, or a whole
// Message.
func (cs *chunkScan) resolveTyped(b []byte) {
	c, a := cs.c, &cs.api
	switch t := string(a.typ); t {
	case "response.output_text.delta":
		c.Content = a.delta
	case "response.reasoning_text.delta", "response.reasoning_summary_text.delta":
		c.Reasoning = a.delta
	case "response.function_call_arguments.delta":
		a.tools = a.tools || len(a.delta) > 0
	case "content_block_delta":
		switch string(a.dType) {
		case "text_delta":
			c.Content = a.dText
		case "thinking_delta":
			c.Reasoning = a.dThinking
		}
	case "message_delta", "message":
		cs.stopFinish()
		if t == "message" {
			c.Content, c.Reasoning = a.text, a.reasoning
		}
	case "message_stop":
		c.End = true
	case "response.completed", "response.incomplete", "response.failed":
		c.End = true
		cs.responseFinish()
		if t == "response.failed" && c.Error == nil {
			c.Error = a.respError
			if c.Error == nil {
				c.Error = b
			}
		}
	case "error":
		if c.Error == nil || a.errMessage != nil {
			c.Error = b // Responses' error event: its message and code are the event's own
		}
	}
}

// stopFinish maps Messages' stop_reason to a finish reason.
func (cs *chunkScan) stopFinish() {
	c, a := cs.c, &cs.api
	switch string(a.stopReason) {
	case "":
		return
	case StopMaxTokens:
		c.Finish = finishLength
	case "tool_use":
		c.Finish = finishTools
	default:
		c.Finish = finishStop
	}
	c.HasFinish = true
}

// responseFinish maps a Response's status to a finish reason:
// incomplete at max_output_tokens is "length", completed "stop".
func (cs *chunkScan) responseFinish() {
	c, a := cs.c, &cs.api
	switch string(a.status) {
	case ResponseCompleted:
		c.Finish, c.HasFinish = finishStop, true
	case ResponseIncomplete:
		c.Finish, c.HasFinish = a.incomplete, a.incomplete != nil
		if string(a.incomplete) == "max_output_tokens" {
			c.Finish = finishLength
		}
	}
}
