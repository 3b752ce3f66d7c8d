package gateway

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tokentrace/tokentrace/internal/openai"
)

// inspectRaw classifies one raw event as the gateway reads it.
func inspectRaw(t testing.TB, p *chunkProbe, raw string) eventKind {
	t.Helper()
	ev, err := newEventReader(strings.NewReader(raw)).Next()
	if err != nil {
		t.Fatalf("%q: %v", raw, err)
	}
	return p.inspect(ev)
}

func TestInspectClassifiesEvents(t *testing.T) {
	cases := []struct {
		ev   string
		want eventKind
	}{
		{"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n", eventOther},
		{"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n", eventContent},
		{"data: {\"choices\": [{\"delta\": {\"content\": \"spaced\"}}]}\n\n", eventContent},
		{"data: {\"choices\":[{\"delta\":{\"content\":\"say \\\"text\\\":\\\"x\"}}]}\n\n", eventContent},
		{"data: {\"choices\":[{\"delta\":{\"content\":\"\\\"content\\\":\\\"x\"}}]}\n\n", eventContent},
		{"data: {\"choices\":[{\"text\":\"completion\"}]}\n\n", eventContent},
		{"data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"hmm\"}}]}\n\n", eventContent},
		{"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0}]}}]}\n\n", eventContent},
		{"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n", eventOther},
		{"data: {\"choices\":[],\"usage\":{\"completion_tokens\":3}}\n\n", eventOther},
		{"data: {\"error\":{\"message\":\"boom\"}}\n\n", eventError},
		{"data: [DONE]\n\n", eventDone},
		{": keep-alive\n\n", eventNoData},
	}
	var p chunkProbe
	for _, c := range cases {
		if got := inspectRaw(t, &p, c.ev); got != c.want {
			t.Errorf("%q: kind %d, want %d", c.ev, got, c.want)
		}
	}
}

// TestInspectUsageAsDecoded: whatever path inspect takes, the kind and the
// usage it reads are those a full decode of the chunk gives.
func TestInspectUsageAsDecoded(t *testing.T) {
	for _, ev := range []string{
		`{"choices":[{"index":0,"delta":{"content":"tok"}}],"usage":null}`,
		`{"choices":[{"index":0,"delta":{"content":"tok"}}],"usage":{"prompt_tokens":12,"completion_tokens":7,"total_tokens":19}}`,
		`{"usage":{"prompt_tokens":1,"completion_tokens":30,"total_tokens":31,"completion_tokens_details":{"reasoning_tokens":2}},"choices":[{"index":0,"text":"x"}]}`,
		`{"choices":[{"index":0,"delta":{"content":"tok"}}],"usage":{"prompt_tokens":12,"completion_tokens":0,"total_tokens":12}}`,
		`{"choices":[{"index":0,"delta":{"content":"usage"}}]}`,
		`{"choices":[{"index":0,"delta":{"content":"\"usage\":{\"completion_tokens\":9}"}}],"usage":null}`,
		`{"choices":[{"index":0,"delta":{"content":"tok"}}], "usage" : {"completion_tokens": 4}}`,
		`{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}],"usage":{"completion_tokens":0}}`,
	} {
		var p chunkProbe
		kind := inspectRaw(t, &p, "data: "+ev+"\n\n")
		var want struct {
			Choices []struct {
				Delta *struct {
					Content string `json:"content"`
				} `json:"delta"`
				Text string `json:"text"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(ev), &want); err != nil {
			t.Fatalf("%s: %v", ev, err)
		}
		wantKind := eventOther
		for _, c := range want.Choices {
			if c.Text != "" || (c.Delta != nil && c.Delta.Content != "") {
				wantKind = eventContent
			}
		}
		if kind != wantKind {
			t.Errorf("%s: kind %d, want %d", ev, kind, wantKind)
		}
		used, ok := p.usage()
		if (want.Usage != nil) != ok || want.Usage != nil && want.Usage.CompletionTokens != used {
			t.Errorf("%s: usage %d %v, decoded %+v", ev, used, ok, want.Usage)
		}
	}
}

// TestNextEventReady: after an event, the reader tells whether the next
// one is already buffered (the flush waits for it, nothing else).
func TestNextEventReady(t *testing.T) {
	for _, c := range []struct {
		buffered string
		want     bool
	}{{"", false}, {"data: {\"a\":1}\n", false}, {"data: {\"a\":1}\n\n", true}, {"data: x\r\n\r\n", true}, {"data: x\n\ndata: partial", true}, {"data: x\r\rdata: y", true}} {
		rd := newEventReader(strings.NewReader("data: first\n\n" + c.buffered))
		if _, err := rd.Next(); err != nil {
			t.Fatal(err)
		}
		if got := rd.Ready(); got != c.want {
			t.Errorf("%q: %v, want %v", c.buffered, got, c.want)
		}
	}
}

func TestCompletionTokens(t *testing.T) {
	for body, want := range map[string]int{
		`{"choices":[{"message":{"content":"say \"completion_tokens\":99"}}],"usage":{"prompt_tokens":3,"completion_tokens":17,"total_tokens":20}}`: 17,
		`{"usage":{"completion_tokens": 5}}`: 5,
		`{"choices":[]}`:                     0,
	} {
		if got, err := answerTokens([]byte(body), &openai.ChunkInfo{}); got != want || err != nil {
			t.Errorf("%s: %d %v, want %d", body, got, err, want)
		}
	}
	for _, body := range []string{"<html>502 Bad Gateway</html>", `{"usage":{"completion_tokens":5}`, "", "[1]"} {
		if _, err := answerTokens([]byte(body), &openai.ChunkInfo{}); err == nil {
			t.Errorf("%q: no error, want one (not a JSON object)", body)
		}
	}
}

// TestInspectFlagsWhatIsNotJSON: a data payload that is neither [DONE]
// nor a JSON object is a protocol error; comments, other SSE fields and
// JSON objects of unexpected shape are not.
func TestInspectFlagsWhatIsNotJSON(t *testing.T) {
	for ev, want := range map[string]eventKind{
		"data: hello\n\n":  eventInvalid,
		"data: <html>\n\n": eventInvalid,
		"data: 42\n\n":     eventInvalid,
		"data: null\n\n":   eventInvalid,
		"data: [1]\n\n":    eventInvalid,
		"data:\n\n":        eventInvalid,
		`data: {"choices":[{"delta":{"content":"x"` + "\n\n": eventInvalid,
		`data: x {"content":"looks like content"}` + "\n\n":  eventInvalid,
		`data: {"choices":"not a list"}` + "\n\n":            eventOther,
		"event: ping\ndata: {}\n\n":                          eventOther,
		": keep-alive\n\n":                                   eventNoData,
		"id: 7\nretry: 100\n\n":                              eventNoData,
		"data:[DONE]\r\n\r\n":                                eventDone,
	} {
		var p chunkProbe
		if got := inspectRaw(t, &p, ev); got != want {
			t.Errorf("%q: kind %d, want %d", ev, got, want)
		}
	}
}
