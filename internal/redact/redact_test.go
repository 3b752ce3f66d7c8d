package redact

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"http://admin:pw@host:8000/v1", "http://xxxxx@host:8000/v1"},
		{"http://token@host", "http://xxxxx@host"},
		{"https://a:p@ss@host/x@y", "https://xxxxx@host/x@y"}, // the last @ of the authority
		{"http://host:8000/v1", "http://host:8000/v1"},
		{"http://admin:pw@", "http://xxxxx@"},
		{"http://host/path?to=a@b", "http://host/path?to=a@b"},
		{"not a url", "not a url"},
	} {
		if got := URL(c.in); got != c.want {
			t.Errorf("URL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestText(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"nothing here", "nothing here"},
		{`dial http://admin:pw-secret@10.0.0.1:8000/v1: refused`, `dial http://xxxxx@10.0.0.1:8000/v1: refused`},
		{`"http://u:p@h" and https://v:q@k/x`, `"http://xxxxx@h" and https://xxxxx@k/x`},
		{"mail me at a@b.c", "mail me at a@b.c"},
		{"api_key: sk-secret-123", "api_key: xxxxx"},
		{"  api_key: 'sk secret'  # note", "  api_key: 'xxxxx'  # note"},
		{`{api_key: sk-1, kind: vllm}`, `{api_key: xxxxx, kind: vllm}`},
		{`{"api_key": "sk-\"1", "b": 2}`, `{"api_key": "xxxxx", "b": 2}`},
		{"?api-key=abc&x=1", "?api-key=xxxxx&x=1"},
		{"X-Api-Key: abc", "X-Api-Key: xxxxx"},
		{"api_key_env: UPSTREAM_KEY", "api_key_env: UPSTREAM_KEY"},
		{"Authorization: Bearer sk-1.2", "Authorization: Bearer xxxxx"},
		{"authorization=Basic YWRtaW46cHc=", "authorization=Basic xxxxx"},
		{`"Authorization":"sk-raw"`, `"Authorization":"xxxxx"`},
		{"sent bearer abc.def to it", "sent bearer xxxxx to it"},
	} {
		if got := Text(c.in); got != c.want {
			t.Errorf("Text(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	// JSON stays JSON.
	in := `{"error":{"message":"Authorization: Bearer sk-1 rejected","api_key":"sk-1"}}`
	if out := Text(in); !json.Valid([]byte(out)) || strings.Contains(out, "sk-1") {
		t.Errorf("Text(%s) = %s", in, out)
	}
}

func TestValues(t *testing.T) {
	got := Values("key sk-abc in upstream; pw in text", "sk-abc", "pw", "")
	if want := "key xxxxx in upstream; pw in text"; got != want {
		t.Errorf("got %q, want %q (values under %d bytes are left)", got, want, MinSecretLen)
	}
}

func TestSecrets(t *testing.T) {
	doc := "pools:\n  - url: http://admin:pw-secret@h:1\n    api_key: \"sk-secret-123\"\n  - {url: http://tok@h, api-key: sk-2}\n"
	want := []string{"admin:pw-secret", "pw-secret", "tok", "sk-secret-123", "sk-2"}
	if d := cmp.Diff(want, Secrets(doc)); d != "" {
		t.Errorf("Secrets (-want +got):\n%s", d)
	}
}

type stringer struct{}

func (stringer) String() string { return "http://u:p4ss@h" }

func TestHandler(t *testing.T) {
	var b bytes.Buffer
	log := slog.New(Handler(slog.NewJSONHandler(&b, nil))).With("base", "http://u:p4ss@h")
	log.Warn("failed Authorization: Bearer tok3n", "err", errors.New("dial http://u:p4ss@h: refused"),
		"s", stringer{}, "n", 3, slog.Group("g", "url", "http://u:p4ss@h"))
	var got map[string]any
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	delete(got, "time")
	want := map[string]any{
		"level": "WARN", "msg": "failed Authorization: Bearer xxxxx", "base": "http://xxxxx@h",
		"err": "dial http://xxxxx@h: refused", "s": "http://xxxxx@h", "n": 3.0, "g": map[string]any{"url": "http://xxxxx@h"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("record (-want +got):\n%s", d)
	}
}

func FuzzText(f *testing.F) {
	f.Add("api_key: sk-1 http://a:b@c Authorization: Bearer x")
	f.Fuzz(func(t *testing.T, s string) {
		out := Text(s)
		if Text(out) != out {
			t.Errorf("Text is not idempotent on %q: %q then %q", s, out, Text(out))
		}
	})
}

func TestQuoting(t *testing.T) {
	doc := "replicas:\n  - {url: http://ops:hunter2-pw@10.0.0.1, api_key: sk-live-123}\ntimeouts: {ttft: sk-live-123s}\n"
	msg := `[3:18] time: invalid duration "sk-live-123s" near http://ops:hunter2-pw@10.0.0.1`
	want := `[3:18] time: invalid duration "xxxxxs" near http://xxxxx@10.0.0.1`
	if got := Quoting(msg, doc); got != want {
		t.Errorf("Quoting = %q, want %q", got, want)
	}
}

func TestHeader(t *testing.T) {
	in := http.Header{
		"Authorization":       {"Bearer sk-secret-1"},
		"Proxy-Authorization": {"Basic dXNlcjpwdw=="},
		"X-Api-Key":           {"key-secret-2"},
		"X-Auth-Token":        {"tok-secret-3"},
		"Cookie":              {"session=s-secret-4"},
		"X-Extra":             {"1", "see http://u:pw-secret-5@host/v1"},
	}
	want := http.Header{
		"Authorization":       {Mask},
		"Proxy-Authorization": {Mask},
		"X-Api-Key":           {Mask},
		"X-Auth-Token":        {Mask},
		"Cookie":              {Mask},
		"X-Extra":             {"1", "see http://xxxxx@host/v1"},
	}
	if diff := cmp.Diff(want, Header(in)); diff != "" {
		t.Errorf("Header (-want +got):\n%s", diff)
	}
	if in.Get("Authorization") != "Bearer sk-secret-1" {
		t.Errorf("Header changed its argument: %v", in)
	}
	if Header(nil) != nil {
		t.Error("Header(nil) is not nil")
	}
}
