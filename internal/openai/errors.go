package openai

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Error is the body of every error response:
// {"error":{"message":…,"type":…,"param":…,"code":…}}.
type Error struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// ErrorBody wraps Error as it is sent.
type ErrorBody struct {
	Error Error `json:"error"`
}

// Error types, as OpenAI names them.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeAuthentication = "authentication_error"
	TypeNotFound       = "not_found_error"
	TypeRateLimit      = "rate_limit_error"
	TypeServer         = "server_error"
	TypeOverloaded     = "overloaded_error"
)

// NewError builds an Error; param and code may be empty.
func NewError(typ, message, param, code string) Error {
	e := Error{Message: message, Type: typ}
	if param != "" {
		e.Param = &param
	}
	if code != "" {
		e.Code = &code
	}
	return e
}

// WriteError sends e with the given HTTP status as the OpenAI error JSON.
// For 429 and 503 a positive retryAfter (seconds) sets Retry-After.
func WriteError(w http.ResponseWriter, status int, e Error, retryAfter int) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(retryAfter))
	}
	w.WriteHeader(status)
	b, _ := json.Marshal(ErrorBody{Error: e})
	b = append(b, '\n')
	_, _ = w.Write(b)
}

// ErrorText is the words of an error value as a stream or an answer
// carries it (ChunkInfo.Error): "type: message" of an object with a
// message (chat's and Responses' error; Messages' event, whose message is
// under "error"), a JSON string as it is (Ollama), else the raw bytes.
func ErrorText(raw []byte) string {
	var e struct {
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Error   json.RawMessage `json:"error"`
	}
	if json.Unmarshal(raw, &e) == nil {
		if e.Message == "" && len(e.Error) > 0 && e.Error[0] == '{' {
			return ErrorText(e.Error)
		}
		if e.Message != "" {
			if e.Type != "" && e.Type != "error" {
				return e.Type + ": " + e.Message
			}
			return e.Message
		}
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}
