package main

import (
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
	"github.com/qgpu-scheduler/qgpu/test/replay/sim"
)

// rampTo is a fake allocation curve: at the 50% floor up to 50% arrived,
// then along the diagonal up to plateau, and flat from there on.
func rampTo(plateau float64) sim.Result {
	r := sim.Result{Alloc: make([]float64, xMax+1)}
	for pct := range r.Alloc {
		r.Alloc[pct] = min(max(float64(pct), yMin), plateau)
	}
	return r
}

func TestWritePlot(t *testing.T) {
	policies := []placement.Policy{"alpha", "beta", "gamma"}
	plateaus := []float64{92, 80, 70}
	results := map[placement.Policy][]sim.Result{}
	for i, p := range policies {
		results[p] = []sim.Result{rampTo(plateaus[i])}
	}
	path := filepath.Join(t.TempDir(), "plot.png")
	const title = "fake.csv, paper mode, seeds 1-2"
	if err := writePlot(path, title, policies, results); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := img.Bounds(), image.Rect(0, 0, plotW, plotH); got != want {
		t.Fatalf("plot is %v, want %v", got, want)
	}

	whole, detail := mainPanel(), detailPanel(policies, results)
	if got, want := [2]float64{detail.y0, detail.y1}, [2]float64{68, 94}; got != want {
		t.Errorf("detail y range %v, want %v (curves from 70 to 92: steps of 2, a quarter step of room)", got, want)
	}
	legend := legendRect(policies)
	if !legend.In(whole.area) {
		t.Errorf("legend %v is not inside the left panel %v", legend, whole.area)
	}
	for i, p := range policies {
		c := styleOf(i, len(policies)).color
		// The sample line's middle: legend rows are in the table's order.
		if at := legendSampleAt(policies, i); !has(img, image.Rectangle{Min: at, Max: at.Add(image.Pt(1, 1))}, c) {
			t.Errorf("%s: legend sample at %v is not %v", p, at, c)
		}
		// The plateau, where the fake curves are apart: the colour is on
		// the curve near (x, plateau) for some x, dashes or not, in both
		// panels.
		for _, pn := range []panel{whole, detail} {
			x0, y := pn.toPixel(100, plateaus[i])
			x1, _ := pn.toPixel(110, plateaus[i])
			if !has(img, image.Rect(x0, y-2, x1, y+3), c) {
				t.Errorf("%s: no %v on the curve near y=%d between x=%d and %d", p, c, y, x0, x1)
			}
		}
	}

	for _, label := range []struct {
		name string
		at   image.Rectangle
		text string
	}{
		{"title", titleRect(title), title},
		{"x label", xLabelRect(), xLabel},
		{"y label", yLabelRect(), yLabel},
		{"detail label", detailLabelRect(detail), detailLabel},
	} {
		if label.at.Overlaps(whole.area) || label.at.Overlaps(detail.area) {
			t.Errorf("%s %v overlaps a panel", label.name, label.at)
		}
		// A 7×13 glyph has a dozen or more ink pixels; spaces have none.
		if got, want := count(img, label.at, ink), 8*len(label.text); got < want {
			t.Errorf("%s: %d ink pixels in %v, want at least %d", label.name, got, label.at, want)
		}
	}
}

// has reports whether c is somewhere in r of img.
func has(img image.Image, r image.Rectangle, c color.RGBA) bool {
	return count(img, r, c) > 0
}

// count is the number of pixels of colour c in r of img.
func count(img image.Image, r image.Rectangle, c color.RGBA) int {
	n := 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			if color.RGBAModel.Convert(img.At(x, y)) == c {
				n++
			}
		}
	}
	return n
}

func TestStylesDiffer(t *testing.T) {
	const n = 12
	seen := map[style]int{}
	for i := range n {
		st := styleOf(i, n)
		if j, ok := seen[st]; ok {
			t.Errorf("policies %d and %d of %d are both drawn %+v", j, i, n, st)
		}
		seen[st] = i
	}
}
