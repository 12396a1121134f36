// Package chart draws pinlab's charts in web pages. A Chart is one chart's
// data as a page embeds it (JSON in a script element); Script and Style
// are the vendored uPlot library (uplot/, MIT, see its README) followed by
// pinlab's drawing code, to be inlined so that a page opens offline with
// nothing fetched from the network. The HTML report (package report) and
// the live dashboard (package dashboard) draw with it.
//
// The drawing code (charts.js) gives every chart a tooltip with the exact
// figures under the cursor, keyboard access (Tab to a chart, then the arrow
// keys, Home and End move through the points; the figures are read out in
// an ARIA live region), a table of the same data built on demand, and the
// colours of the page's light or dark scheme (prefers-color-scheme).
package chart

import (
	_ "embed"
	"fmt"
	"html/template"
	"math"
	"strconv"
)

// Kind is how a chart draws its series.
type Kind string

const (
	// Line draws each series as a line over X (seconds of the run).
	Line Kind = "line"
	// Bars draws one bar per category (X is 0, 1, ... n-1), one series.
	Bars Kind = "bars"
)

// Chart is one chart's data. The page's figure element for it carries
// data-chart="ID" (see Figure).
type Chart struct {
	ID    string `json:"id"`
	Kind  Kind   `json:"kind"`
	Title string `json:"title"`
	// XLabel and YLabel name the axes; Unit follows every figure in
	// tooltips and tables ("calls/s").
	XLabel string `json:"x_label"`
	YLabel string `json:"y_label"`
	Unit   string `json:"unit,omitempty"`
	// XUnit "s" says each X is the second starting there (tooltips read
	// "12 s to 13 s").
	XUnit string `json:"x_unit,omitempty"`
	// X are the x values: seconds for Line (the second starting at X),
	// 0..n-1 for Bars.
	X Values `json:"x"`
	// Categories label the bars of a Bars chart, one per X; Notes, when
	// set, add a line per bar to its tooltip and table row.
	Categories []string `json:"categories,omitempty"`
	Notes      []string `json:"notes,omitempty"`
	Series     []Series `json:"series"`
	// XMax and YMax fix the axes' ends, so that charts shown side by side
	// compare at a glance; zero means from the data (for Bars, XMax is the
	// last category's index).
	XMax float64 `json:"x_max,omitempty"`
	YMax float64 `json:"y_max,omitempty"`
	// Marks are vertical lines with a label (timeline steps); Bands are
	// shaded spans (measurement windows, error windows).
	Marks []Mark `json:"marks,omitempty"`
	Bands []Band `json:"bands,omitempty"`
}

// Series is one series of a chart.
type Series struct {
	// Label is short, for the legend ("p1"); Name is in full, for tooltips
	// and tables ("p1 pricing-7d9f8-a"); empty means Label.
	Label string `json:"label"`
	Name  string `json:"name,omitempty"`
	// Values are index-aligned with the chart's X; NaN is a gap (null).
	Values Values `json:"values"`
}

// Mark is a vertical line at At (seconds) labelled Text.
type Mark struct {
	At   float64 `json:"at"`
	Text string  `json:"text"`
}

// BandKind tells what a band shades.
type BandKind string

// Band kinds.
const (
	Window BandKind = "window" // a measurement window
	Errors BandKind = "error"  // a stretch with failed calls
)

// Band is a shaded span [From, To) in seconds.
type Band struct {
	From float64  `json:"from"`
	To   float64  `json:"to"`
	Kind BandKind `json:"kind"`
	Text string   `json:"text"`
}

// Values are a chart's numbers. They marshal to JSON as the shortest
// decimal that reads back the same, NaN as null: the page shows exactly
// what is written.
type Values []float64

// MarshalJSON writes the values as a JSON array.
func (v Values) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 2+6*len(v))
	b = append(b, '[')
	for i, x := range v {
		if i > 0 {
			b = append(b, ',')
		}
		if math.IsNaN(x) || math.IsInf(x, 0) {
			b = append(b, "null"...)
			continue
		}
		b = strconv.AppendFloat(b, x, 'f', -1, 64)
	}
	return append(b, ']'), nil
}

var (
	//go:embed uplot/uPlot.iife.min.js
	uplotJS string
	//go:embed uplot/uPlot.min.css
	uplotCSS string
	//go:embed charts.js
	chartsJS string
	//go:embed charts.css
	chartsCSS string
)

// Script returns the script to inline in a page: uPlot, then pinlab's
// drawing code, which defines window.pinlabChart (draw, table, drawAll)
// and window.pinlabCharts (every drawn chart by ID: its kind, series and
// points as drawn; what the browser tests read).
func Script() template.JS { return template.JS(uplotJS + "\n" + chartsJS) }

// Style returns the style sheet to inline in a page: uPlot's, then
// pinlab's, with the colours of both schemes as CSS variables.
func Style() template.CSS { return template.CSS(uplotCSS + "\n" + chartsCSS) }

// Figure is an html/template definition, "chart", of the figure element a
// chart is drawn into; execute it with the Chart (its data goes into the
// page separately, as JSON). Parse it into a page's template set.
const Figure = `{{define "chart"}}<figure class="chart chart-{{.Kind}}" data-chart="{{.ID}}" id="{{.ID}}">
<figcaption>{{.Title}}</figcaption>
<div class="plot" tabindex="0" role="img" aria-roledescription="chart" aria-label="{{.Title}}: {{.Describe}}"></div>
<div class="legend" aria-hidden="true"></div>
<p class="readout" aria-live="polite"></p>
<details class="data"><summary>Table of this chart</summary></details>
</figure>{{end}}`

// Describe says what the chart shows, for screen readers.
func (c Chart) Describe() string {
	keys := "arrow keys move through the points, and the figures are read out"
	if c.Kind == Bars {
		return fmt.Sprintf("bar chart of %s, one bar per %s (%d); %s", c.YLabel, c.XLabel, len(c.X), keys)
	}
	return fmt.Sprintf("line chart of %s over %s, %d series of %d points; %s", c.YLabel, c.XLabel, len(c.Series), len(c.X), keys)
}
