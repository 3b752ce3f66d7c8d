package chart

import (
	"strings"
	"testing"
)

// TestPageWrapsBodyInTheHouseHead: a page built with Page has the
// one head (escaped title, the house style, then the page's own rules) and
// its body inside <main>.
func TestPageWrapsBodyInTheHouseHead(t *testing.T) {
	page := Page("t", nil, ".own { color:red; }\n", "<h1>{{.Title}}</h1>\n")
	var b strings.Builder
	if err := page.Execute(&b, struct{ Title string }{"a <b>"}); err != nil {
		t.Fatal(err)
	}
	s := b.String()
	for _, want := range []string{
		"<!DOCTYPE html>", "<title>a &lt;b&gt;</title>", ":root { --fg:#1d2330;",
		".scroll { overflow-x:auto; }\n.own { color:red; }\n</style>",
		"<main>\n<h1>a &lt;b&gt;</h1>\n</main>\n</body>\n</html>\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("page lacks %q:\n%s", want, s)
		}
	}
}
