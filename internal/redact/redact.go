package redact

import (
	"regexp"
	"strings"
)

// Mask is what a credential is replaced with (net/url's URL.Redacted uses
// the same).
const Mask = "xxxxx"

// URL returns raw, a URL, with its userinfo (user and password) replaced
// by Mask: "http://admin:pw@host:8000/v1" → "http://xxxxx@host:8000/v1".
// It works on strings that do not parse as URLs too: everything between
// "://" and the last "@" before the path is masked.
func URL(raw string) string {
	i := strings.Index(raw, "://")
	if i < 0 {
		return Text(raw)
	}
	rest := raw[i+3:]
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	at := strings.LastIndexByte(rest[:end], '@')
	if at < 0 {
		return raw
	}
	return raw[:i+3] + Mask + rest[at:]
}

var (
	// scheme://userinfo@ — the userinfo runs to the last @ before the
	// path, a quote, a space or an angle bracket.
	userinfoRE = regexp.MustCompile(`(?i)\b([a-z][a-z0-9+.\-]*://)[^/?#\s"'<>\\]*@`)
	// api_key / api-key / apikey / x-api-key followed by : or = and a
	// value, quoted or not.
	apiKeyRE = regexp.MustCompile(`(?i)(\bapi[_-]?key["']?\s*[:=]\s*)("(?:[^"\\]|\\.)*"|'[^']*'|[^\s,;&}"']+)`)
	// Authorization: [scheme] credentials.
	authRE = regexp.MustCompile(`(?i)(\b(?:proxy-)?authorization["']?\s*[:=]\s*["']?)((?:bearer|basic|token|digest)\s+)?[A-Za-z0-9._~+/=:\-]+`)
	// Bearer tokens anywhere else.
	bearerRE = regexp.MustCompile(`(?i)(\bbearer\s+)[A-Za-z0-9._~+/=\-]+`)
)

// Text masks every credential it recognises in free text: URL userinfo,
// api_key values (api_key: v, api_key=v, "api_key": "v"; quotes are
// kept, so JSON stays valid), Authorization header values and bearer
// tokens. Text without any is returned unchanged (and unallocated).
func Text(s string) string {
	if !strings.Contains(s, "@") && !containsFold(s, "key") && !containsFold(s, "auth") && !containsFold(s, "bearer") {
		return s
	}
	s = userinfoRE.ReplaceAllString(s, "${1}"+Mask+"@")
	s = apiKeyRE.ReplaceAllStringFunc(s, func(m string) string {
		sub := apiKeyRE.FindStringSubmatch(m)
		v := sub[2]
		if q := v[0]; q == '"' || q == '\'' {
			return sub[1] + string(q) + Mask + string(q)
		}
		return sub[1] + Mask
	})
	s = authRE.ReplaceAllString(s, "${1}${2}"+Mask)
	return bearerRE.ReplaceAllString(s, "${1}"+Mask)
}

// Secrets returns the credential values Text would mask in s: URL
// userinfo (user:password as written, and the password alone) and
// api_key values (unquoted). Give them to Values to mask the same values
// where they appear without their context, e.g. in a parser's message
// quoting a token of the document.
func Secrets(s string) []string {
	var out []string
	for _, m := range userinfoRE.FindAllString(s, -1) {
		ui := m[strings.Index(m, "://")+3 : len(m)-1]
		out = append(out, ui)
		if _, pw, ok := strings.Cut(ui, ":"); ok {
			out = append(out, pw)
		}
	}
	for _, sub := range apiKeyRE.FindAllStringSubmatch(s, -1) {
		v := sub[2]
		if q := v[0]; q == '"' || q == '\'' {
			v = strings.Trim(v, string(q))
		}
		out = append(out, v)
	}
	return out
}

// MinSecretLen is the shortest value Values masks: shorter ones would
// match ordinary words.
const MinSecretLen = 4

// Values masks every occurrence in s of the given secret values (a
// configured API key, a password), those shorter than MinSecretLen
// excepted.
func Values(s string, secrets ...string) string {
	for _, v := range secrets {
		if len(v) >= MinSecretLen && strings.Contains(s, v) {
			s = strings.ReplaceAll(s, v, Mask)
		}
	}
	return s
}

// Quoting returns msg, a message about the document doc (a parse error
// that may quote it), with the credentials Text recognises masked and
// every credential value of doc (Secrets) masked wherever msg quotes it
// bare, as a duration error quoting its value would.
func Quoting(msg, doc string) string {
	return Values(Text(msg), Secrets(doc)...)
}

func containsFold(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if strings.EqualFold(s[i:i+len(sub)], sub) {
			return true
		}
	}
	return false
}
