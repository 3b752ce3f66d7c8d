package httplimit

import "net/http"

// NoRedirects is the CheckRedirect of every HTTP client of this module
// (bench, the app, the agent's tools, the gateway's and bench's scrapes):
// a 3xx answer is the answer, never followed. Following one would resend
// the prompt, and the upstream's credentials, to wherever its Location
// points; the caller sees the 3xx as the failure it is.
func NoRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
