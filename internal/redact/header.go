package redact

import "net/http"

// credentialHeaderWords name a header whose whole value is a credential:
// Authorization and Proxy-Authorization, X-Api-Key, Api-Key, X-Auth-Token,
// Cookie and the like.
var credentialHeaderWords = []string{"authorization", "key", "token", "secret", "password", "cookie"}

// CredentialHeader reports whether a header of this name carries a
// credential as its whole value (its name holds one of
// credentialHeaderWords, in any case).
func CredentialHeader(name string) bool {
	for _, w := range credentialHeaderWords {
		if containsFold(name, w) {
			return true
		}
	}
	return false
}

// Header returns a copy of h fit to record: the values of credential
// headers (CredentialHeader) replaced by Mask, every other value passed
// through Text. A nil h gives nil.
func Header(h http.Header) http.Header {
	if h == nil {
		return nil
	}
	out := make(http.Header, len(h))
	for k, vs := range h {
		masked := make([]string, len(vs))
		for i, v := range vs {
			if CredentialHeader(k) {
				masked[i] = Mask
			} else {
				masked[i] = Text(v)
			}
		}
		out[k] = masked
	}
	return out
}
