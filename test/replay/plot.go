package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
	"github.com/qgpu-scheduler/qgpu/test/replay/sim"
)

// The plot: allocation % (y) against arrived demand % of capacity (x), one
// curve per policy (the mean over seeds), drawn with image/png and the
// 7×13 bitmap face of golang.org/x/image, in two panels: the whole run on
// the left, and on the right the knee and the plateaus enlarged, where the
// policies differ by a point or two. The margins hold the title and the y
// axis label above the panels, the tick labels and the x axis label below.
// The curves stay on the 50% floor up to about 50% arrived, rise along the
// diagonal and plateau from about 95%, so the legend sits in the left
// panel's bottom-right corner, which they never reach.
const (
	plotW, plotH = 1360, 600
	marginL      = 56
	marginR      = 24
	marginT      = 52
	marginB      = 52
	mainW        = 840 // the width of the left panel's plot area
	panelGap     = 56  // room for the right panel's tick labels
	xMax         = 130
	yMin, yMax   = 50.0, 100.0
	detailFrom   = 90 // the arrived % the right panel starts at, before the knee

	textH = 13 // the height of a line of basicfont.Face7x13

	xLabel      = "arrived GPU demand, % of cluster capacity"
	yLabel      = "GPU allocated, % of capacity"
	detailLabel = "the grey box, enlarged"
)

var (
	white    = color.RGBA{255, 255, 255, 255}
	ink      = color.RGBA{0, 0, 0, 255}
	gridGrey = color.RGBA{225, 225, 225, 255}
	axisGrey = color.RGBA{110, 110, 110, 255}
	boxGrey  = color.RGBA{170, 170, 170, 255}
	face     = basicfont.Face7x13
)

// palette has a colour for each of twelve policies; the second six are
// also dashed, so a colour that is hard to tell from its neighbour still
// has a pattern that differs.
var palette = [12]color.RGBA{
	{228, 26, 28, 255}, {55, 126, 184, 255}, {77, 175, 74, 255},
	{152, 78, 163, 255}, {255, 127, 0, 255}, {166, 86, 40, 255},
	{0, 139, 139, 255}, {231, 41, 138, 255}, {128, 128, 0, 255},
	{23, 190, 207, 255}, {40, 40, 150, 255}, {140, 140, 140, 255},
}

// style is how one policy's curve and legend sample are drawn.
type style struct {
	color  color.RGBA
	dashed bool
	width  int
}

// styleOf is the style of the i-th of n policies. The last one (the
// shipped default under --policy all and default) is black and thicker, so
// it stands out and, drawn last, lies on top.
func styleOf(i, n int) style {
	if i == n-1 {
		return style{color: ink, width: 4}
	}
	return style{color: palette[i%len(palette)], dashed: i%len(palette) >= 6, width: 2}
}

// plotTitle names what the plot shows: the pod list, the mode and the seeds
// as given on the command line.
func plotTitle(podsPath string, mode sim.Mode, seeds string) string {
	return fmt.Sprintf("%s, %s mode, seeds %s", filepath.Base(podsPath), mode, seeds)
}

// writePlot draws the policies' mean curves to a PNG at path, under title,
// and says on stdout what it drew.
func writePlot(path, title string, policies []placement.Policy, results map[placement.Policy][]sim.Result) error {
	img := image.NewRGBA(image.Rect(0, 0, plotW, plotH))
	fill(img, img.Bounds(), white)
	whole, detail := mainPanel(), detailPanel(policies, results)
	whole.drawAxes(img)
	detail.drawAxes(img)
	whole.outline(img, detail)
	for i, p := range policies {
		st := styleOf(i, len(policies))
		whole.drawCurve(img, results[p], st)
		detail.drawCurve(img, results[p], st)
	}
	drawLegend(img, policies)
	drawText(img, title, titleRect(title).Min, ink)
	drawText(img, xLabel, xLabelRect().Min, ink)
	drawText(img, yLabel, yLabelRect().Min, ink)
	drawText(img, detailLabel, detailLabelRect(detail).Min, ink)
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	names := make([]string, len(policies))
	for i, p := range policies {
		names[i] = string(p)
	}
	fmt.Printf("plot %s: %s; x arrived %% of GPU capacity, y allocated %%; legend: %s (the last in black)\n",
		path, title, strings.Join(names, ", "))
	return f.Close()
}

// panel is a plot area and the ranges of data it shows, with a grid line
// every step.
type panel struct {
	area          image.Rectangle
	x0, x1, xStep float64
	y0, y1, yStep float64
}

// mainPanel shows the whole run.
func mainPanel() panel {
	return panel{area: image.Rect(marginL, marginT, marginL+mainW, plotH-marginB),
		x0: 0, x1: xMax, xStep: 10, y0: yMin, y1: yMax, yStep: 5}
}

// detailPanel shows the curves from detailFrom % arrived on, its y range
// fitted to them, in steps of 1, 2, 5 or 10 points.
func detailPanel(policies []placement.Policy, results map[placement.Policy][]sim.Result) panel {
	lo, hi := yMax, yMin
	for _, p := range policies {
		for pct := detailFrom; pct <= xMax; pct++ {
			m := summarize(results[p], pct).mean
			lo, hi = min(lo, m), max(hi, m)
		}
	}
	step := 1.0
	for _, s := range []float64{1, 2, 5, 10} {
		if step = s; (hi-lo)/s <= 14 {
			break
		}
	}
	y0 := max(math.Floor((lo-step/4)/step)*step, 0)
	y1 := min(math.Ceil((hi+step/4)/step)*step, yMax)
	return panel{area: image.Rect(marginL+mainW+panelGap, marginT, plotW-marginR, plotH-marginB),
		x0: detailFrom, x1: xMax, xStep: 5, y0: y0, y1: max(y1, y0+step), yStep: step}
}

// toPixel is where (x, y) is drawn; y is held within the panel's range.
func (p panel) toPixel(x, y float64) (int, int) {
	a := p.area
	px := a.Min.X + int((x-p.x0)/(p.x1-p.x0)*float64(a.Dx()))
	y = min(max(y, p.y0), p.y1)
	py := a.Max.Y - int((y-p.y0)/(p.y1-p.y0)*float64(a.Dy()))
	return px, py
}

// drawAxes draws the grid, the axes and the tick labels.
func (p panel) drawAxes(img *image.RGBA) {
	a := p.area
	for x := p.x0; x <= p.x1; x += p.xStep {
		px, _ := p.toPixel(x, p.y0)
		fill(img, image.Rect(px, a.Min.Y, px+1, a.Max.Y), gridGrey)
		s := strconv.FormatFloat(x, 'f', -1, 64)
		drawText(img, s, image.Pt(px-textWidth(s)/2, a.Max.Y+6), ink)
	}
	for y := p.y0; y <= p.y1; y += p.yStep {
		_, py := p.toPixel(p.x0, y)
		fill(img, image.Rect(a.Min.X, py, a.Max.X, py+1), gridGrey)
		s := strconv.FormatFloat(y, 'f', -1, 64)
		drawText(img, s, image.Pt(a.Min.X-6-textWidth(s), py-textH/2), ink)
	}
	fill(img, image.Rect(a.Min.X, a.Min.Y, a.Min.X+1, a.Max.Y+1), axisGrey)
	fill(img, image.Rect(a.Min.X, a.Max.Y, a.Max.X, a.Max.Y+1), axisGrey)
}

// outline marks the part of p that other shows.
func (p panel) outline(img *image.RGBA, other panel) {
	x0, y0 := p.toPixel(other.x0, other.y1)
	x1, y1 := p.toPixel(other.x1, other.y0)
	r := image.Rect(x0, y0, x1+1, y1+1)
	fill(img, r, boxGrey)
	fill(img, r.Inset(1), white)
}

func (p panel) drawCurve(img *image.RGBA, rs []sim.Result, st style) {
	pen := pen{img: img, style: st}
	from := max(int(p.x0), 1)
	prevX, prevY := p.toPixel(float64(from), summarize(rs, from).mean)
	for pct := from + 1; pct <= int(p.x1); pct++ {
		x, y := p.toPixel(float64(pct), summarize(rs, pct).mean)
		pen.line(prevX, prevY, x, y)
		prevX, prevY = x, y
	}
}

// The legend's layout: a row per policy, each a sample of its line and
// its name, in a framed box.
const (
	legendPad    = 8
	legendRow    = textH + 3
	legendSample = 36
)

// legendRect is where the legend of policies is drawn: the plot area's
// bottom-right corner, a little inside it.
func legendRect(policies []placement.Policy) image.Rectangle {
	w := 0
	for _, p := range policies {
		w = max(w, textWidth(string(p)))
	}
	size := image.Pt(2*legendPad+legendSample+legendPad+w, 2*legendPad+len(policies)*legendRow)
	corner := mainPanel().area.Max.Sub(image.Pt(12, 12))
	return image.Rectangle{Min: corner.Sub(size), Max: corner}
}

// legendSampleAt is the middle of the i-th policy's sample line.
func legendSampleAt(policies []placement.Policy, i int) image.Point {
	r := legendRect(policies)
	return image.Pt(r.Min.X+legendPad+legendSample/2, r.Min.Y+legendPad+i*legendRow+legendRow/2)
}

func drawLegend(img *image.RGBA, policies []placement.Policy) {
	r := legendRect(policies)
	fill(img, r, axisGrey)
	fill(img, r.Inset(1), white)
	for i, p := range policies {
		mid := legendSampleAt(policies, i)
		pen := pen{img: img, style: styleOf(i, len(policies))}
		pen.line(mid.X-legendSample/2, mid.Y, mid.X+legendSample/2, mid.Y)
		drawText(img, string(p), image.Pt(mid.X+legendSample/2+legendPad, mid.Y-textH/2), ink)
	}
}

// titleRect, xLabelRect, yLabelRect and detailLabelRect are where those
// texts are drawn: the title centred above the panels, the y label and the
// right panel's caption above their y axes, and the x label centred below
// the tick labels of both panels.
func titleRect(title string) image.Rectangle {
	return textRect(title, image.Pt((plotW-textWidth(title))/2, 8))
}

func yLabelRect() image.Rectangle {
	return textRect(yLabel, image.Pt(marginL-24, marginT-textH-10))
}

func detailLabelRect(detail panel) image.Rectangle {
	return textRect(detailLabel, image.Pt(detail.area.Min.X-24, marginT-textH-10))
}

func xLabelRect() image.Rectangle {
	w := plotW - marginL - marginR
	return textRect(xLabel, image.Pt(marginL+(w-textWidth(xLabel))/2, plotH-textH-8))
}

// textRect is the box of s drawn with its top-left corner at at.
func textRect(s string, at image.Point) image.Rectangle {
	return image.Rectangle{Min: at, Max: at.Add(image.Pt(textWidth(s), textH))}
}

func textWidth(s string) int { return font.MeasureString(face, s).Round() }

// drawText writes s in c with the top-left corner of its box at at.
func drawText(img *image.RGBA, s string, at image.Point, c color.RGBA) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: face, Dot: fixed.P(at.X, at.Y+face.Ascent)}
	d.DrawString(s)
}

func fill(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	draw.Draw(img, r, image.NewUniform(c), image.Point{}, draw.Src)
}

// pen draws lines in a style. It counts the pixels it has stepped over, so
// a dash pattern runs on across the short segments a curve is made of.
type pen struct {
	img   *image.RGBA
	style style
	steps int
}

// dashOn and dashOff are the lengths, in steps, of a dash and of its gap.
const dashOn, dashOff = 8, 5

func (p *pen) dot(x, y int) {
	on := !p.style.dashed || p.steps%(dashOn+dashOff) < dashOn
	p.steps++
	if on {
		lo := -(p.style.width - 1) / 2
		fill(p.img, image.Rect(x+lo, y+lo, x+lo+p.style.width, y+lo+p.style.width), p.style.color)
	}
}

// line draws with Bresenham's algorithm.
func (p *pen) line(x0, y0, x1, y1 int) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	err := dx + dy
	for {
		p.dot(x0, y0)
		if x0 == x1 && y0 == y1 {
			return
		}
		if e2 := 2 * err; e2 >= dy {
			err += dy
			x0 += sx
		} else {
			err += dx
			y0 += sy
		}
	}
}

func abs(v int) int { return max(v, -v) }

func sign(v int) int {
	switch {
	case v > 0:
		return 1
	case v < 0:
		return -1
	}
	return 0
}
