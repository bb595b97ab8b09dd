package console

import (
	"fmt"
	"html/template"
	"time"

	"github.com/shopspring/decimal"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
)

// chart is a bar chart the server draws as SVG: numbers only go into the
// drawing's attributes, labels are text the template escapes.
type chart struct {
	Width, Height int
	Bars          []bar
}

type bar struct {
	X, Y, W, H float64
	Label      string
	Value      string
	LabelX     float64
	// Kind is the points' kind, written under the label; Shade numbers
	// the kind among the chart's (its fill, by class, from the style
	// sheet): the same kind, the same shade.
	Kind  string
	Shade int
}

const (
	chartWidth  = 640
	chartHeight = 190
	chartBase   = 150 // the bars stand on this line; their labels below
	shades      = 6   // .shade0 to .shade5 in console.css
)

// kindChart draws one bar a value, each with its kind: a month (or a
// date) of several kinds has a bar for each, side by side.
func kindChart(labels, values, kinds []string) chart {
	c := barChart(labels, values)
	seen := map[string]int{}
	for i := range c.Bars {
		n, ok := seen[kinds[i]]
		if !ok {
			n = len(seen) % shades
			seen[kinds[i]] = n
		}
		c.Bars[i].Kind, c.Bars[i].Shade = kinds[i], n
	}
	return c
}

// barChart draws one bar a value, scaled to the largest.
func barChart(labels, values []string) chart {
	c := chart{Width: chartWidth, Height: chartHeight}
	if len(values) == 0 {
		return c
	}
	nums := make([]decimal.Decimal, len(values))
	largest := decimal.Zero
	for i, v := range values {
		d, err := decimal.NewFromString(v)
		if err != nil {
			d = decimal.Zero
		}
		nums[i] = d.Abs()
		if nums[i].GreaterThan(largest) {
			largest = nums[i]
		}
	}
	slot := float64(chartWidth) / float64(len(values))
	for i, d := range nums {
		h := 0.0
		if largest.IsPositive() {
			f, _ := d.Div(largest).Float64()
			h = f * (chartBase - 24) // room above the tallest for its figure
		}
		x := float64(i) * slot
		c.Bars = append(c.Bars, bar{X: x + slot*0.1, Y: chartBase - h, W: slot * 0.8, H: h, Label: labels[i], Value: values[i], LabelX: x + slot/2})
	}
	return c
}

// expiryChart: how many points of each kind expire on each date.
func expiryChart(buckets []*pb.Bucket) chart {
	var labels, values, kinds []string
	for _, b := range buckets {
		label := "never"
		if b.ExpireTime != nil {
			label = b.ExpireTime.AsTime().UTC().Format(time.DateOnly)
		}
		labels, values, kinds = append(labels, label), append(values, b.Amount), append(kinds, kindName(b.Kind))
	}
	return kindChart(labels, values, kinds)
}

// monthChart: an amount a month and kind (the reconcile report's rows).
func monthChart(ms []*pb.MonthAmount) chart {
	var labels, values, kinds []string
	for _, m := range ms {
		labels, values, kinds = append(labels, m.Month), append(values, m.Amount), append(kinds, kindName(m.Kind))
	}
	return kindChart(labels, values, kinds)
}

// kindName is a kind as the pages show it: "standard" for points written
// without one.
func kindName(k string) string {
	if k == "" {
		return "standard"
	}
	return k
}

var funcs = template.FuncMap{
	// num writes a coordinate: a number, nothing else, into an attribute.
	"num":        func(f float64) string { return fmt.Sprintf("%.1f", f) },
	"formatTime": formatTime,
}
