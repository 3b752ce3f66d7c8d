package openai

import (
	"fmt"
	"testing"
)

// TestScanAPIEvents reads the Responses, Messages and Ollama events and
// whole answers serve writes (and the error events of each API) with
// ScanChunk: each API's text delta is content, its reasoning or thinking
// delta reasoning, its usage prompt/completion/cached/reasoning tokens,
// its end event the end, its own finish reason the chat one.
func TestScanAPIEvents(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"type":"response.output_text.delta","sequence_number":10,"item_id":"m","output_index":1,"content_index":0,"delta":" with","logprobs":[]}`,
			`typed=true native=false end=false out=true content=" with" reason="" finish="" usage=false p=0/false c=0/false cached=0 rt=0 err=""`},
		{`{"type":"response.reasoning_text.delta","sequence_number":3,"item_id":"rs","output_index":0,"content_index":0,"delta":"by"}`,
			`typed=true native=false end=false out=true content="" reason="by" finish="" usage=false p=0/false c=0/false cached=0 rt=0 err=""`},
		{`{"type":"response.completed","sequence_number":15,"response":{"id":"r","object":"response","status":"incomplete","output":[{"type":"message","content":[{"type":"output_text","text":"x"}]}],"usage":{"input_tokens":3,"input_tokens_details":{"cached_tokens":1},"output_tokens":5,"output_tokens_details":{"reasoning_tokens":3},"total_tokens":8},"incomplete_details":{"reason":"max_output_tokens"},"error":null}}`,
			`typed=true native=false end=true out=false content="" reason="" finish="length" usage=true p=3/true c=5/true cached=1 rt=3 err=""`},
		{`{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","content":[],"usage":{"input_tokens":2,"cache_creation_input_tokens":0,"cache_read_input_tokens":4,"output_tokens":0}}}`,
			`typed=true native=false end=false out=false content="" reason="" finish="" usage=true p=6/true c=0/true cached=4 rt=0 err=""`},
		{`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"key"}}`,
			`typed=true native=false end=false out=true content="" reason="key" finish="" usage=false p=0/false c=0/false cached=0 rt=0 err=""`},
		{`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":" one"}}`,
			`typed=true native=false end=false out=true content=" one" reason="" finish="" usage=false p=0/false c=0/false cached=0 rt=0 err=""`},
		{`{"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"output_tokens":5}}`,
			`typed=true native=false end=false out=false content="" reason="" finish="length" usage=true p=0/false c=5/true cached=0 rt=0 err=""`},
		{`{"type":"message_stop"}`,
			`typed=true native=false end=true out=false content="" reason="" finish="" usage=false p=0/false c=0/false cached=0 rt=0 err=""`},
		{`{"type":"error","error":{"type":"overloaded_error","message":"x"}}`,
			`typed=true native=false end=false out=false content="" reason="" finish="" usage=false p=0/false c=0/false cached=0 rt=0 err="{\"type\":\"overloaded_error\",\"message\":\"x\"}"`},
		{`{"type":"error","code":"c","message":"boom","param":null,"sequence_number":3}`,
			`typed=true native=false end=false out=false content="" reason="" finish="" usage=false p=0/false c=0/false cached=0 rt=0 err="{\"type\":\"error\",\"code\":\"c\",\"message\":\"boom\",\"param\":null,\"sequence_number\":3}"`},
		{`{"model":"m","created_at":"x","message":{"role":"assistant","content":"","thinking":"page"},"done":false}`,
			`typed=false native=true end=false out=true content="" reason="page" finish="" usage=false p=0/false c=0/false cached=0 rt=0 err=""`},
		{`{"model":"m","created_at":"x","message":{"role":"assistant","content":""},"done":true,"done_reason":"length","prompt_eval_count":2,"eval_count":5,"eval_duration":3}`,
			`typed=false native=true end=true out=false content="" reason="" finish="length" usage=true p=2/true c=5/true cached=0 rt=0 err=""`},
		{`{"error":"model not found"}`,
			`typed=false native=false end=false out=false content="" reason="" finish="" usage=false p=0/false c=0/false cached=0 rt=0 err="\"model not found\""`},
		{`{"id":"msg","type":"message","role":"assistant","content":[{"type":"thinking","thinking":"a","signature":"s"},{"type":"text","text":"b"}],"stop_reason":"end_turn","usage":{"input_tokens":5,"output_tokens":5}}`,
			`typed=true native=false end=false out=true content="b" reason="a" finish="stop" usage=true p=5/true c=5/true cached=0 rt=0 err=""`},
		{`{"id":"resp","object":"response","status":"completed","output":[{"type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"r"}]},{"type":"message","content":[{"type":"output_text","text":"t"}]}],"usage":{"input_tokens":2,"output_tokens":2}}`,
			`typed=false native=false end=false out=true content="t" reason="r" finish="stop" usage=true p=2/true c=2/true cached=0 rt=0 err=""`},
	} {
		var ch ChunkInfo
		if err := ScanChunk([]byte(c.in), &ch); err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		got := fmt.Sprintf("typed=%v native=%v end=%v out=%v content=%q reason=%q finish=%q usage=%v p=%d/%v c=%d/%v cached=%d rt=%d err=%q",
			ch.Typed, ch.Native, ch.End, ch.Output, ch.Content, ch.Reasoning, ch.Finish, ch.HasUsage, ch.PromptTokens, ch.HasPrompt,
			ch.CompletionTokens, ch.HasCompletion, ch.CachedTokens, ch.ReasoningTokens, ch.Error)
		if got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.in, got, c.want)
		}
	}
}
