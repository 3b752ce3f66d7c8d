package chart

import "html/template"

// Page returns the template of one of tokentrace's self-contained HTML
// pages (the report, a comparison, plan's answer): the one page head —
// charset, viewport, the title from the data's Title field, the house style
// followed by css, the page's own rules — around body, what goes inside
// <main>. Every page is built with it, so they share one look written once.
func Page(name string, funcs template.FuncMap, css, body string) *template.Template {
	return template.Must(template.New(name).Funcs(funcs).Parse(pageHead + css + pageMid + body + pageTail))
}

const (
	pageHead = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
:root { --fg:#1d2330; --muted:#5b6475; --line:#dde1e8; --bg:#f6f7f9; --crit:#b42318; --warn:#b54708; --info:#175cd3; --ok:#067647; }
* { box-sizing: border-box; }
body { margin:0; font:15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Liberation Sans", Arial, sans-serif; color:var(--fg); background:var(--bg); }
main { max-width:1240px; margin:0 auto; padding:20px 24px 48px; }
h1 { font-size:22px; margin:0 0 4px; } h2 { font-size:18px; margin:28px 0 10px; border-bottom:1px solid var(--line); padding-bottom:4px; }
.muted { color:var(--muted); }
table { border-collapse:collapse; background:#fff; border:1px solid var(--line); font-size:13.5px; margin:6px 0; }
th, td { padding:5px 10px; border-bottom:1px solid var(--line); text-align:right; white-space:nowrap; }
th { background:#eef1f5; font-weight:600; }
figure { margin:0; background:#fff; border:1px solid var(--line); border-radius:8px; padding:8px; }
figcaption { color:var(--muted); font-size:12.5px; padding:2px 4px; }
svg.chart { width:100%; height:auto; display:block; }
.scroll { overflow-x:auto; }
`
	pageMid = `</style>
</head>
<body>
<main>
`
	pageTail = `</main>
</body>
</html>
`
)
