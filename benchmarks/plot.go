package main

import (
	"math"
	"os"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// panel is one plot of the PNG: a group's runs, x from a parameter.
type panel struct {
	title, xLabel, yLabel string
	group                 string
	x                     func(Result) float64
	y                     func(Result) float64
}

func param(key string) func(Result) float64 {
	return func(r Result) float64 {
		switch v := r.Params[key].(type) {
		case int:
			return float64(v)
		case float64:
			return v
		case string:
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
		return 0
	}
}

func eventsPerSec(r Result) float64 { return r.EventsPerSec }

func p50(r Result) float64 {
	if r.P50MS == nil {
		return 0
	}
	return *r.P50MS
}

var panels = []panel{
	{"dispatch vs batch size (C=1000)", "BatchSize", "events/s", groupBatchX, param("batch"), eventsPerSec},
	{"dispatch vs concurrency (B=100)", "Concurrency", "events/s", groupConcX, param("concurrency"), eventsPerSec},
	{"claim p50 vs pending backlog (B=100)", "pending rows", "ms", groupBacklog, param("backlog"), p50},
	{"emit vs payload size (4 writers)", "payload bytes", "events/s", groupPayload, param("payload"), eventsPerSec},
}

// plotCurves draws the four scaling curves, log-scaled x, in one PNG.
func plotCurves(path string, runs []run) error {
	plots := make([][]*plot.Plot, 2)
	for i, pn := range panels {
		p, err := pn.plot(runs)
		if err != nil {
			return err
		}
		plots[i/2] = append(plots[i/2], p)
	}
	img := vgimg.New(12*vg.Inch, 8*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 2, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		for j := range plots[i] {
			plots[i][j].Draw(canvases[i][j])
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func (pn panel) plot(runs []run) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = pn.title, pn.xLabel, pn.yLabel
	p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	var pts plotter.XYs
	for _, r := range runs {
		if r.spec.group == pn.group && r.err == nil && r.res.Verified {
			if x := pn.x(r.res); x > 0 {
				pts = append(pts, plotter.XY{X: x, Y: pn.y(r.res)})
			}
		}
	}
	if len(pts) == 0 {
		pts = plotter.XYs{{X: 1, Y: 0}}
	}
	line, points, err := plotter.NewLinePoints(pts)
	if err != nil {
		return nil, err
	}
	p.Add(line, points, plotter.NewGrid())
	p.Y.Min = 0
	p.Y.Max = math.Max(p.Y.Max, 1)
	return p, nil
}
