package main

import (
	"io"
	"os"
	"slices"
	"strings"
)

// maxLine is where lastLines cuts a line (klog lines carry whole argvs).
const maxLine = 300

// lastLines returns the last n lines of the file at path ("" if it cannot
// be read), reading at most its last 64 KiB.
func lastLines(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const most = 64 << 10
	if st, err := f.Stat(); err == nil && st.Size() > most {
		_, _ = f.Seek(-most, io.SeekEnd)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	for i, l := range lines {
		if len(l) > maxLine {
			lines[i] = l[:maxLine] + " …"
		}
	}
	return strings.Join(lines, "\n")
}

// indent prefixes every line of s and ends it with a newline ("" stays "").
func indent(s, prefix string) string {
	if s == "" {
		return ""
	}
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix) + "\n"
}

func sortedStrings(s []string) []string {
	slices.Sort(s)
	return s
}
