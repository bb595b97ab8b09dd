package report

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// writeHTML writes r as one self-contained HTML page: no external scripts, styles, fonts or images.
func writeHTML(w io.Writer, r *Report) error {
	if r == nil {
		r = &Report{}
	}
	if err := reportPage.Execute(w, r); err != nil {
		return fmt.Errorf("write html report: %w", err)
	}
	return nil
}

var reportPage = template.Must(template.New("report").Funcs(template.FuncMap{
	"load":           runLoad,
	"ratio":          func(p Percentiles) float64 { return safeRatio(p.P99, p.P50) },
	"codes":          codeList,
	"groups":         groupList,
	"throttles":      ThrottleList,
	"campaignRatios": campaignRatios,
	"campaigns": func(runs []Run) bool {
		return slices.ContainsFunc(runs, func(r Run) bool { return r.Campaign != nil })
	},
	"campaignRatio": func(runs []Run, name string) string {
		for _, c := range campaignRatios(runs) {
			if c.Run == name {
				return fmt.Sprintf("%.2f ×", c.Ratio)
			}
		}
		return "–"
	},
	"throughputChart": func(run Run) template.HTML {
		xs, ok, errs := timelineSeries(run, func(s Second) (float64, float64) { return float64(s.OK), float64(s.Errors) })
		return lineChart("throughput", xs, []chartSeries{{"ok/s", "#2a7f3f", ok}, {"errors/s", "#c62828", errs}}, "requests/s")
	},
	"latencyChart": func(run Run) template.HTML {
		xs, p50, p99 := timelineSeries(run, func(s Second) (float64, float64) { return s.P50, s.P99 })
		return lineChart("latency", xs, []chartSeries{{"p50", "#1f5fbf", p50}, {"p99", "#e07b00", p99}}, "ms")
	},
	"histogramChart": histogramChart,
}).Parse(reportTemplate))

func runLoad(run Run) string {
	if run.Mode == "open" {
		return fmt.Sprintf("%.0f/s", run.Rate)
	}
	return strconv.Itoa(run.Concurrency)
}

func safeRatio(a, b float64) float64 {
	if b <= 0 || math.IsNaN(a) || math.IsInf(a, 0) || math.IsInf(b, 0) {
		return 0
	}
	return a / b
}

func timelineSeries(run Run, pick func(Second) (float64, float64)) (xs, as, bs []float64) {
	for _, s := range run.Timeline {
		a, b := pick(s)
		xs, as, bs = append(xs, s.T), append(as, a), append(bs, b)
	}
	return xs, as, bs
}

// chartSeries is one line of a chart: ys[i] is drawn at xs[i].
type chartSeries struct {
	name  string
	color string
	ys    []float64
}

const (
	chartW, chartH                       = 640, 240
	padLeft, padRight, padTop, padBottom = 60, 16, 36, 40
	plotW, plotH                         = chartW - padLeft - padRight, chartH - padTop - padBottom
)

// lineChart draws series over xs (seconds) as an SVG, with y from 0 up.
// Points that are NaN or infinite are left out, breaking the line.
func lineChart(title string, xs []float64, series []chartSeries, yUnit string) template.HTML {
	xMin, xMax := finiteRange(xs)
	yMax := 0.0
	for _, s := range series {
		_, m := finiteRange(s.ys)
		yMax = math.Max(yMax, m)
	}
	if !isFinite(xMax - xMin) {
		return noData(title)
	}
	if xMax <= xMin {
		xMax = xMin + 1
	}
	var b strings.Builder
	yTop := chartFrame(&b, title, yMax, yUnit, series)
	sx := func(x float64) float64 { return padLeft + (x-xMin)/(xMax-xMin)*plotW }
	step := niceStep((xMax - xMin) / 6)
	first := math.Ceil(xMin/step) * step
	for i := 0; i <= 12 && first+float64(i)*step <= xMax+step/1e6; i++ {
		x := first + float64(i)*step
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`, sx(x), padTop+plotH+16, tickLabel(x))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">time (s)</text>`, padLeft+plotW/2, chartH-4)
	for _, s := range series {
		var d strings.Builder
		move := true
		for i, x := range xs {
			if i >= len(s.ys) || !isFinite(x) || !isFinite(s.ys[i]) {
				move = true
				continue
			}
			cmd := "L"
			if move {
				cmd, move = "M", false
			}
			fmt.Fprintf(&d, "%s%.1f %.1f ", cmd, sx(x), scaleY(s.ys[i], yTop))
		}
		if d.Len() > 0 {
			fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.5"/>`, strings.TrimSpace(d.String()), s.color)
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// histogramChart draws buckets as bars of equal width: the buckets are
// log-spaced, so the x axis is logarithmic.
func histogramChart(buckets []Bucket) template.HTML {
	const title = "latency histogram"
	var maxCount int64
	for _, bk := range buckets {
		maxCount = max(maxCount, bk.Count)
	}
	if maxCount <= 0 {
		return noData(title)
	}
	var b strings.Builder
	yTop := chartFrame(&b, title, float64(maxCount), "requests", []chartSeries{{name: "requests", color: "#5b7fa6"}})
	barW := float64(plotW) / float64(len(buckets))
	labelEvery := (len(buckets) + 9) / 10
	for i, bk := range buckets {
		x, y := padLeft+float64(i)*barW, scaleY(float64(bk.Count), yTop)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#5b7fa6"><title>≤ %s ms: %d</title></rect>`,
			x+barW*0.1, y, barW*0.8, padTop+plotH-y, tickLabel(bk.UpperMS), bk.Count)
		if (len(buckets)-1-i)%labelEvery == 0 { // always the last, the overflow bucket
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`, x+barW/2, padTop+plotH+16, tickLabel(bk.UpperMS))
		}
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">latency ≤ ms (log scale)</text>`, padLeft+plotW/2, chartH-4)
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// chartFrame opens the SVG and draws the title, the legend, the axes and the
// y gridlines up to a round value above yMax, which it returns.
func chartFrame(b *strings.Builder, title string, yMax float64, yUnit string, legend []chartSeries) float64 {
	if !(yMax > 0) {
		yMax = 1
	}
	yMax = math.Min(yMax, 1e300) // so that the rounded-up top stays finite
	step := niceStep(yMax / 4)
	yTop := math.Ceil(yMax/step) * step
	esc := template.HTMLEscapeString
	fmt.Fprintf(b, `<svg class="chart" viewBox="0 0 %d %d" width="%d" height="%d" role="img" font-size="11" font-family="sans-serif"><title>%s</title>`,
		chartW, chartH, chartW, chartH, esc(title))
	fmt.Fprintf(b, `<text x="%d" y="16" font-size="13" font-weight="bold">%s</text>`, padLeft, esc(title))
	for i := 0; i <= 12 && float64(i)*step <= yTop+step/1e6; i++ {
		y := scaleY(float64(i)*step, yTop)
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e4e4e4"/>`, padLeft, y, padLeft+plotW, y)
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`, padLeft-6, y+4, tickLabel(float64(i)*step))
	}
	fmt.Fprintf(b, `<text x="12" y="%d" transform="rotate(-90 12 %d)" text-anchor="middle">%s</text>`,
		padTop+plotH/2, padTop+plotH/2, esc(yUnit))
	fmt.Fprintf(b, `<path d="M%d %d V%d H%d" fill="none" stroke="#555"/>`, padLeft, padTop, padTop+plotH, padLeft+plotW)
	x := chartW - padRight - 90*len(legend)
	for _, s := range legend {
		fmt.Fprintf(b, `<rect x="%d" y="8" width="12" height="10" fill="%s"/><text x="%d" y="17">%s</text>`, x, s.color, x+16, esc(s.name))
		x += 90
	}
	return yTop
}

func scaleY(y, yTop float64) float64 {
	return padTop + plotH - math.Min(math.Max(y, 0), yTop)/yTop*plotH
}

func noData(title string) template.HTML {
	return template.HTML(`<p class="nodata">` + template.HTMLEscapeString(title) + `: no data</p>`)
}

func isFinite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// finiteRange is the smallest and largest finite value of vs, or (+Inf, -Inf) if there is none.
func finiteRange(vs []float64) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, v := range vs {
		if isFinite(v) {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	return lo, hi
}

// niceStep rounds raw up to 1, 2 or 5 times a power of ten, so tick labels are round.
func niceStep(raw float64) float64 {
	if !(raw > 0) || math.IsInf(raw, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, f := range []float64{1, 2, 5} {
		if raw <= f*p {
			return f * p
		}
	}
	return 10 * p
}

// tickLabel formats v with three significant digits, or as a whole number from 1000 to 1e6.
func tickLabel(v float64) string {
	switch {
	case math.IsNaN(v):
		return "–"
	case math.IsInf(v, 1):
		return "∞"
	case v == 0:
		return "0"
	}
	a := math.Abs(v)
	if a >= 1e6 {
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
	if a >= 1000 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	p := math.Pow(10, 2-math.Floor(math.Log10(a)))
	return strconv.FormatFloat(math.Round(v*p)/p, 'f', -1, 64)
}

const reportTemplate = `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>pointledger loadtest{{with .Options.Scenario}}: {{.}}{{end}}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:2em auto;max-width:1340px;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0}th,td{padding:3px 8px;border-bottom:1px solid #ddd;text-align:right}
th:first-child,td:first-child,td.text{text-align:left}code{background:#f4f4f4;padding:1px 4px}
.chart{margin:.5em 1em .5em 0;vertical-align:top}.nodata{color:#888;font-style:italic}
.bad{color:#c62828;font-weight:bold}.good{color:#2a7f3f;font-weight:bold}.muted{color:#666}
</style></head><body>
<h1>pointledger loadtest{{with .Options.Scenario}}: {{.}}{{end}}</h1>
<p>{{if not .Date.IsZero}}{{.Date.UTC.Format "2006-01-02 15:04 MST"}} · {{end}}{{.Machine}}{{with .Target}} · target {{.}}{{end}}</p>
{{with .Command}}<p><code>{{.}}</code></p>{{end}}
{{with .Options}}<p class="muted">scenario {{.Scenario}} · concurrency {{.Concurrency}}{{if .Rate}} · rate {{.Rate}}/s{{end}} · duration {{.DurationS}} s · warm-up {{.WarmupS}} s · users {{.Users}} · added DynamoDB latency {{.LatencyMS}} ms{{with .MaxBatch}} · max batch {{.}}{{end}}{{with .Mix}} · mix {{.}}{{end}}</p>{{end}}

<h2>Summary</h2>
{{if .Runs}}<table>
<tr><th>run</th><th>mode</th><th>load</th><th>ok/s</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>p99.9 ms</th><th>max ms</th><th>p99/p50</th><th>outcomes</th></tr>
{{range $i, $run := .Runs}}{{with .Latency}}<tr><td><a href="#run-{{$i}}">{{$run.Name}}</a></td><td>{{$run.Mode}}</td><td>{{load $run}}</td><td>{{printf "%.0f" $run.Throughput}}</td><td>{{printf "%.1f" .P50}}</td><td>{{printf "%.1f" .P90}}</td><td>{{printf "%.1f" .P99}}</td><td>{{printf "%.1f" .P999}}</td><td>{{printf "%.1f" .Max}}</td><td>{{printf "%.1f" (ratio .)}}</td><td class="text">{{codes $run.Codes}}</td></tr>
{{end}}{{end}}</table>
{{range .Comparisons}}<p>{{.Run}} / {{.Baseline}}: {{printf "%.2f" .Ratio}} × purchases/s</p>
{{end}}{{else}}<p class="nodata">no runs</p>{{end}}
{{if campaigns .Runs}}<h3>Campaign</h3>
<table>
<tr><th>run</th><th>shards</th><th>grants/s</th><th>against the first</th><th>overspent</th><th>first BUDGET_EXHAUSTED</th><th>acknowledged before it</th><th>throttled (requests, by table and key kind)</th></tr>
{{range $i, $run := .Runs}}{{with .Campaign}}<tr><td><a href="#run-{{$i}}">{{$run.Name}}</a></td><td>{{.Shards}}</td><td>{{printf "%.1f" .GrantsPerS}}</td><td>{{campaignRatio $.Runs $run.Name}}</td><td>{{template "overspent" .}}</td><td>{{if .Exhausted}}{{printf "%.1f" .FirstExhaustedS}} s{{else}}none came{{end}}</td><td>{{if .Exhausted}}{{.AckedBeforeFirstExhausted}} of {{.Grants}} ({{printf "%.1f" .AckedShare}}%){{else}}–{{end}}</td><td class="text">{{throttles $run.Throttles}}</td></tr>
{{end}}{{end}}</table>
{{range campaignRatios .Runs}}<p>{{.Run}} / {{.Baseline}}: <b>{{printf "%.2f" .Ratio}} × grants/s</b> ({{.Shards}} shards against {{.BaseShards}})</p>
{{end}}{{end}}

{{range $i, $run := .Runs}}<h2 id="run-{{$i}}">{{.Name}}</h2>
{{with .Description}}<p>{{.}}</p>{{end}}
<p class="muted">{{.Mode}} loop, load {{load .}}, {{.DurationS}} s, {{.Requests}} requests, {{.OK}} acknowledged</p>
<div>{{throughputChart .}}{{latencyChart .}}{{histogramChart .Histogram}}</div>
{{if gt (len .ByOp) 1}}<table>
<tr><th>operation</th><th>requests</th><th>mean ms</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>p99.9 ms</th><th>max ms</th><th>outcomes</th></tr>
{{range $op, $p := .ByOp}}<tr><td>{{$op}}</td><td>{{$p.Count}}</td><td>{{printf "%.1f" $p.Mean}}</td><td>{{printf "%.1f" $p.P50}}</td><td>{{printf "%.1f" $p.P90}}</td><td>{{printf "%.1f" $p.P99}}</td><td>{{printf "%.1f" $p.P999}}</td><td>{{printf "%.1f" $p.Max}}</td><td class="text">{{codes (index $run.CodesByOp $op)}}</td></tr>
{{end}}</table>{{end}}
{{if or (gt .ItemWritesPerPurchase 0.0) (gt .ItemWritesPerMutation 0.0) .Notes .Throttles .LedgerdCPU}}<ul>
{{with .LedgerdCPU}}<li>{{.Summary}}</li>{{end}}
{{if gt .ItemWritesPerPurchase 0.0}}<li>{{printf "%.2f" .ItemWritesPerPurchase}} ledger item writes per acknowledged purchase ({{.Transactions}} transactions, {{.Conflicts}} cancelled for conflict)</li>{{else if gt .ItemWritesPerMutation 0.0}}<li>{{printf "%.2f" .ItemWritesPerMutation}} ledger item writes per acknowledged mutation ({{.Transactions}} transactions, {{.Conflicts}} cancelled for conflict)</li>{{end}}
{{if gt .WriteUnitsPerPurchase 0.0}}<li>{{printf "%.2f" .WriteUnitsPerPurchase}} ledger write units per acknowledged purchase, by DynamoDB's rules</li>{{end}}
{{with .Throttles}}<li>throttled by the partition limits (requests, by table and key kind): {{throttles .}}</li>{{end}}
{{range .Notes}}<li>{{.}}</li>
{{end}}</ul>{{end}}
{{with .Webhooks}}<p>webhooks: {{.Events}} events ({{.Notices}} notices) for {{.Users}} users, {{printf "%.0f" .EventsPerS}}/s; delivery lag p50 {{printf "%.1f" .Lag.P50}} ms, p99 {{printf "%.1f" .Lag.P99}} ms, max {{printf "%.1f" .Lag.Max}} ms; {{.Duplicates}} duplicates, {{.Gaps}} gaps ({{.Missing}} versions missing), {{.OutOfOrder}} out of order, {{.Refused}} refused, {{.Malformed}} malformed</p>{{end}}
{{with .Campaign}}<p>campaign: budget {{.BudgetID}} on {{.Shards}} shard(s), {{.Grants}} grants of {{.GrantAmount}}: {{.GrantsSent}} sent, {{.GrantsAcked}} acknowledged, {{printf "%.1f" .GrantsPerS}} grants/s; granted {{.Granted}}, remaining {{.Remaining}} of {{.Total}}, overspent {{template "overspent" .}}</p>
<p>{{if .Exhausted}}first BUDGET_EXHAUSTED {{printf "%.1f" .FirstExhaustedS}} s into the measurement, after {{.AckedBeforeFirstExhausted}} grants acknowledged ({{printf "%.1f" .AckedShare}}% of the budget's {{.Grants}}), {{.SentBeforeFirstExhausted}} sent{{else}}the budget was not exhausted within the measurement{{end}}{{with .Refusals}}; grants refused or failed: {{codes .}}{{end}}</p>
{{end}}
{{with .Kinds}}<h3>Point kinds</h3>
<p>{{.Purchases}} purchases drew, by kind: {{.DrawList}}; purchases refused, by reason: {{.RefusalList}}</p>
<table>
<tr><th>check</th><th>checked</th><th>result</th></tr>
{{range .Checks}}<tr><td class="text">{{.Name}}</td><td>{{.Checked}}</td><td{{if .Violations}} class="bad"{{end}}>{{.Result}}</td></tr>
{{end}}</table>
{{end}}
{{with .Fleet}}<p>{{.Instances}} instances{{if .Affinity}} with affinity{{end}}, balanced by {{.Balancer}}; the write path from each one's <code>/metrics</code>:</p>
<table>
<tr><th>instance</th><th>calls</th><th>ok</th><th>purchases/s</th><th>committed</th><th>groups</th><th>mean group</th><th>conflicts</th><th>CPUs</th><th>retries</th><th>group sizes</th><th>outcomes</th></tr>
{{range .PerInstance}}{{template "instance" .}}{{end}}{{template "instance" .Total}}</table>
{{with .Kill}}<p>SIGKILL of {{.Instance}} {{printf "%.1f" .AtS}} s into the measurement: {{if ge .TakenOutAfterMS 0.0}}taken out of the balancer {{printf "%.0f" .TakenOutAfterMS}} ms after it, by {{.TakenOutBy}}{{else}}never taken out of the balancer{{end}}; {{.FailedCalls}} calls to it cut off or refused; {{if ge .LastFailureMS 0.0}}the last mutation that failed for want of an instance was sent {{printf "%.0f" .LastFailureMS}} ms after the kill{{else}}no mutation failed for want of an instance{{end}} (window {{printf "%.0f" .WindowMS}} ms); {{.ServedLater}} mutations sent after the window served, over {{.Users}} users.</p>{{end}}
{{end}}
{{end}}
{{with .Invariants}}<h2>Invariants</h2>
<p>{{.Users}} users, {{.Entries}} entries, {{.Acked}} acknowledged and {{.Unacked}} unacknowledged requests</p>
{{if or .Granted .Spent .Refunded .Balances}}<p>granted {{.Granted}} − spent {{.Spent}} + refunded {{.Refunded}} − expired {{or .Expired "0"}} = sum of balances {{.Balances}}</p>{{end}}
{{if .Holds}}<p>holds by how they ended:{{range $state, $n := .Holds}} {{$n}} {{$state}}{{end}}</p>{{end}}
{{if .Checked}}<ul>{{range .Checked}}<li>checked: {{.}}</li>{{end}}</ul>{{end}}
{{if .OK}}<p class="good">0 violations</p>{{else}}<p class="bad">{{len .Violations}} violation{{if gt (len .Violations) 1}}s{{end}}</p>
<ul>{{range .Violations}}<li class="bad">{{.}}</li>{{end}}</ul>{{end}}
{{end}}</body></html>
{{define "overspent"}}{{with .Overspent}}<span class="{{if eq . "0"}}good{{else}}bad{{end}}">{{.}}</span>{{else}}–{{end}}{{end}}
{{define "instance"}}<tr><td>{{.Name}}</td><td>{{.Calls}}</td><td>{{.OK}}</td><td>{{printf "%.0f" .Purchases}}</td><td>{{.Committed}}</td><td>{{.Groups}}</td><td>{{printf "%.1f" .MeanGroup}}</td><td>{{.Conflicts}}</td><td>{{printf "%.2f" .CPU}}</td><td class="text">{{codes .Retries}}</td><td class="text">{{groups .GroupSizes}}</td><td class="text">{{codes .Codes}}{{if or .Forwarded .FellBack .ForwardFailures}}; forwarded {{.Forwarded}}, no answer {{codes .ForwardFailures}}, committed here instead {{.FellBack}}{{end}}{{with .Note}} ({{.}}){{end}}</td></tr>
{{end}}`
