// Package chart is the house style of tokentrace's HTML pages: gonum plots
// with one look (fonts, grid, ticks, palette), drawn to inline SVG, and the
// one page head every self-contained page (the report, a comparison, plan's
// answer) is built with. It holds no analysis; report and capacity draw
// with it.
//
// It imports nothing of tokentrace's, so any page may use it.
package chart
