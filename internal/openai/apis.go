package openai

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// API is one of the HTTP APIs of LLM serving that tokentrace speaks:
// OpenAI's chat completions, completions and Responses, Anthropic's
// Messages, and Ollama's native chat (docs/metrics.md, "The APIs").
type API uint8

// The APIs.
const (
	APIChat        API = iota // POST /v1/chat/completions
	APICompletions            // POST /v1/completions
	APIResponses              // POST /v1/responses (OpenAI's Responses)
	APIMessages               // POST /v1/messages (Anthropic's Messages)
	APIOllama                 // POST /api/chat (Ollama's native chat, NDJSON)
	// APISGLang is SGLang's native POST /generate (its answer's meta_info
	// carries the request's timing), spoken by bench only: tokentrace
	// serve does not serve it and the gateway passes it on as any other
	// path (it is not in APIs, and APIOfPath does not name it).
	APISGLang
)

// APIs lists every API tokentrace serves and proxies, in the order of the
// constants (all but APISGLang).
var APIs = []API{APIChat, APICompletions, APIResponses, APIMessages, APIOllama}

var apiNames = [...]string{"chat", "completions", "responses", "messages", "ollama", "sglang"}

var apiPaths = [...]string{"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages", "/api/chat", "/generate"}

// String is the API's name as the command line spells it (--endpoint).
func (a API) String() string {
	if int(a) < len(apiNames) {
		return apiNames[a]
	}
	return "api(" + strconv.Itoa(int(a)) + ")"
}

// Path is the API's request path.
func (a API) Path() string { return apiPaths[a] }

// ParseAPI returns the API of a name String gives; ok is false for any
// other.
func ParseAPI(name string) (API, bool) {
	for i, n := range apiNames {
		if n == name {
			return API(i), true
		}
	}
	return 0, false
}

// APIOfPath returns the API of APIs whose request path is p.
func APIOfPath(p string) (API, bool) {
	for _, a := range APIs {
		if apiPaths[a] == p {
			return a, true
		}
	}
	return 0, false
}

// Typed reports whether the API streams typed events (Responses' and
// Messages' "event:" names with a "type" in each payload) rather than
// chunks ending in [DONE].
func (a API) Typed() bool { return a == APIResponses || a == APIMessages }

// NDJSON reports whether the API streams newline-delimited JSON objects
// rather than server-sent events (Ollama's native API).
func (a API) NDJSON() bool { return a == APIOllama }

// Chat reports whether the API's prompt is a list of messages (every API
// but completions and SGLang's /generate, whose prompt is text).
func (a API) Chat() bool { return a != APICompletions && a != APISGLang }

// WriteErrorAs sends e with the given status in api's own error shape:
// OpenAI's {"error":{…}} for chat, completions and Responses;
// Anthropic's {"type":"error","error":{"type":…,"message":…}} for
// Messages (the type mapped to Anthropic's names, MessagesErrorType);
// Ollama's {"error":"…"}. For 429 and 503 a positive retryAfter (seconds)
// sets Retry-After.
func WriteErrorAs(w http.ResponseWriter, api API, status int, e Error, retryAfter int) {
	switch api {
	case APIMessages:
		h := w.Header()
		h.Set("Content-Type", "application/json")
		if retryAfter > 0 {
			h.Set("Retry-After", strconv.Itoa(retryAfter))
		}
		w.WriteHeader(status)
		b, _ := json.Marshal(MessagesErrorBody{Type: "error", Error: MessagesError{Type: MessagesErrorType(status, e.Type), Message: e.Message}})
		_, _ = w.Write(append(b, '\n'))
	case APIOllama:
		h := w.Header()
		h.Set("Content-Type", "application/json")
		if retryAfter > 0 {
			h.Set("Retry-After", strconv.Itoa(retryAfter))
		}
		w.WriteHeader(status)
		b, _ := json.Marshal(OllamaError{Error: e.Message})
		_, _ = w.Write(append(b, '\n'))
	default:
		WriteError(w, status, e, retryAfter)
	}
}

// WriteAs sends e in api's error shape (WriteErrorAs).
func (e *APIError) WriteAs(w http.ResponseWriter, api API, retryAfter int) {
	WriteErrorAs(w, api, e.Status, e.Err, retryAfter)
}

// ErrorPayload is e as api's stream carries an error once the answer has
// begun: chat and completions' {"error":{…}} data event; Responses'
// "error" event ({"type":"error","code","message","param"}); Messages'
// "error" event ({"type":"error","error":{…}}); Ollama's {"error":"…"}
// line. name is the SSE event name (empty for chat, completions and
// Ollama).
func ErrorPayload(api API, status int, e Error) (name string, payload []byte) {
	switch api {
	case APIResponses:
		b, _ := json.Marshal(struct {
			Type    string  `json:"type"`
			Code    *string `json:"code"`
			Message string  `json:"message"`
			Param   *string `json:"param"`
		}{"error", e.Code, e.Message, e.Param})
		return "error", b
	case APIMessages:
		b, _ := json.Marshal(MessagesErrorBody{Type: "error", Error: MessagesError{Type: MessagesErrorType(status, e.Type), Message: e.Message}})
		return "error", b
	case APIOllama:
		b, _ := json.Marshal(OllamaError{Error: e.Message})
		return "", b
	}
	b, _ := json.Marshal(ErrorBody{Error: e})
	return "", b
}

// MessagesError is Anthropic's error object.
type MessagesError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// MessagesErrorBody is Anthropic's error response and stream event.
type MessagesErrorBody struct {
	Type  string        `json:"type"`
	Error MessagesError `json:"error"`
}

// MessagesErrorType is Anthropic's error type for an answer of status
// whose OpenAI error type is typ: invalid_request_error (400),
// authentication_error (401), permission_error (403), not_found_error
// (404), request_too_large (413), rate_limit_error (429), api_error
// (500), overloaded_error (503, 529).
func MessagesErrorType(status int, typ string) string {
	switch {
	case status == http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case status == http.StatusUnauthorized || typ == TypeAuthentication:
		return "authentication_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusNotFound:
		return "not_found_error"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status == http.StatusServiceUnavailable || status == 529 || typ == TypeOverloaded:
		return "overloaded_error"
	case status >= 500:
		return "api_error"
	}
	return TypeInvalidRequest
}

// OllamaError is Ollama's error response and stream line.
type OllamaError struct {
	Error string `json:"error"`
}
