package main

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"strconv"
	"strings"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
	"github.com/qgpu-scheduler/qgpu/test/replay/sim"
)

// The plot: allocation % (y) against arrived demand % of capacity (x), one
// curve per policy (the mean over seeds), drawn with image/png alone. Axis
// ticks are labelled with a 3×5 digit font; the legend is a colour swatch per
// policy in the table's order, and the colours are printed.
const (
	plotW, plotH = 900, 560
	marginL      = 60
	marginB      = 40
	marginT      = 20
	marginR      = 20
	yMin, yMax   = 50.0, 100.0
)

var palette = []color.RGBA{{228, 26, 28, 255}, {55, 126, 184, 255}, {77, 175, 74, 255}, {152, 78, 163, 255},
	{255, 127, 0, 255}, {166, 86, 40, 255}, {0, 0, 0, 255}}

var colorNames = []string{"red", "blue", "green", "purple", "orange", "brown", "black"}

func writePlot(path string, policies []placement.Policy, results map[placement.Policy][]sim.Result) error {
	img := image.NewRGBA(image.Rect(0, 0, plotW, plotH))
	fill(img, img.Bounds(), color.RGBA{255, 255, 255, 255})
	grey := color.RGBA{220, 220, 220, 255}
	for x := 0; x <= 130; x += 10 {
		px, _ := toPixel(float64(x), yMin)
		line(img, px, marginT, px, plotH-marginB, grey)
		digits(img, strconv.Itoa(x), px-6, plotH-marginB+8)
	}
	for y := yMin; y <= yMax; y += 5 {
		_, py := toPixel(0, y)
		line(img, marginL, py, plotW-marginR, py, grey)
		digits(img, strconv.Itoa(int(y)), marginL-30, py-5)
	}
	var legend []string
	for i, p := range policies {
		c := palette[i%len(palette)]
		prevX, prevY := -1, -1
		for pct := 1; pct <= 130; pct++ {
			x, y := toPixel(float64(pct), summarize(results[p], pct).mean)
			if prevX >= 0 {
				thick(img, prevX, prevY, x, y, c)
			}
			prevX, prevY = x, y
		}
		fill(img, image.Rect(marginL+20+i*30, marginT+10, marginL+40+i*30, marginT+20), c)
		legend = append(legend, fmt.Sprintf("%s=%s", p, colorNames[i%len(colorNames)]))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	fmt.Printf("plot %s: x arrived %% of GPU capacity, y allocated %%; swatches left to right: %s\n", path, strings.Join(legend, " "))
	return f.Close()
}

func toPixel(x, y float64) (int, int) {
	px := marginL + int(x/130*float64(plotW-marginL-marginR))
	y = min(max(y, yMin), yMax)
	py := plotH - marginB - int((y-yMin)/(yMax-yMin)*float64(plotH-marginB-marginT))
	return px, py
}

func fill(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			img.SetRGBA(x, y, c)
		}
	}
}

// line draws with Bresenham's algorithm.
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	err := dx + dy
	for {
		img.SetRGBA(x0, y0, c)
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

func thick(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA) {
	for d := -1; d <= 1; d++ {
		line(img, x0, y0+d, x1, y1+d, c)
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

// font3x5 are the digits, five rows of three bits each.
var font3x5 = [10][5]uint8{
	{7, 5, 5, 5, 7}, {2, 6, 2, 2, 7}, {7, 1, 7, 4, 7}, {7, 1, 7, 1, 7}, {5, 5, 7, 1, 1},
	{7, 4, 7, 1, 7}, {7, 4, 7, 5, 7}, {7, 1, 1, 1, 1}, {7, 5, 7, 5, 7}, {7, 5, 7, 1, 7},
}

// digits writes s at (x, y), two pixels per font pixel.
func digits(img *image.RGBA, s string, x, y int) {
	black := color.RGBA{0, 0, 0, 255}
	for i, r := range s {
		g := font3x5[r-'0']
		for row := range 5 {
			for col := range 3 {
				if g[row]&(4>>col) != 0 {
					fill(img, image.Rect(x+i*8+col*2, y+row*2, x+i*8+col*2+2, y+row*2+2), black)
				}
			}
		}
	}
}
