// Package redact removes credentials from text before it reaches a log
// line, an error message or a response: the userinfo of URLs
// (http://user:password@host), api_key values, Authorization headers and
// bearer tokens in free text, known secret values, the credential headers
// of an http.Header, and every record of a slog.Handler. It imports
// nothing internal (stdlib only), so any package may use it.
package redact
