package main

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/tools/go/packages"
)

// compiler type-checks mutated files in their packages without building
// anything: the packages are loaded once, their dependencies from the
// export data the build cache already holds, and each mutant then costs one
// go/types pass over its package's parsed files with the one file replaced
// (milliseconds, where a go build per mutant takes seconds).
//
// A mutant must compile as `go test` builds it under the overlay: its
// package with the package's own tests, and the external tests (package
// x_test) against the changed package.
type compiler struct {
	root string // trimmed from the positions of errors
	fset *token.FileSet
	// byFile: an absolute file path → the loaded packages compiling it (the
	// package, and its variant with the in-package tests).
	byFile map[string][]*packages.Package
	// externalTests: a package ID → the x_test packages importing it.
	externalTests map[string][]*packages.Package
}

const loadMode = packages.NeedName | packages.NeedFiles | packages.NeedCompiledGoFiles |
	packages.NeedImports | packages.NeedTypes | packages.NeedSyntax | packages.NeedTypesSizes | packages.NeedModule

// loadCompiler loads the packages in dirs (relative to root) with their
// tests. The unchanged packages must compile: a mutant can only be judged
// against code that does.
func loadCompiler(root string, dirs []string) (*compiler, error) {
	c := &compiler{root: root, fset: token.NewFileSet(), byFile: map[string][]*packages.Package{}, externalTests: map[string][]*packages.Package{}}
	patterns := make([]string, len(dirs))
	for i, d := range dirs {
		patterns[i] = "./" + filepath.ToSlash(d)
	}
	pkgs, err := packages.Load(&packages.Config{Mode: loadMode, Dir: root, Tests: true, Fset: c.fset}, patterns...)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", strings.Join(patterns, " "), err)
	}
	var broken []string
	for _, p := range pkgs {
		if p.Name == "main" && strings.HasSuffix(p.ID, ".test") {
			continue // the generated test main
		}
		for _, e := range p.Errors {
			broken = append(broken, c.relative(e.Error()))
		}
		for _, f := range p.CompiledGoFiles {
			c.byFile[f] = append(c.byFile[f], p)
		}
		if strings.HasSuffix(p.Name, "_test") {
			for _, imp := range p.Imports {
				c.externalTests[imp.ID] = append(c.externalTests[imp.ID], p)
			}
		}
	}
	if len(broken) > 0 {
		return nil, fmt.Errorf("the packages do not compile unchanged:\n  %s", strings.Join(limit(broken, 10), "\n  "))
	}
	return c, nil
}

// check type-checks every package that compiles file with src in its place,
// and the external tests against the changed package.
func (c *compiler) check(file string, src []byte) error {
	pkgs := c.byFile[file]
	if len(pkgs) == 0 {
		return fmt.Errorf("%s is compiled into no package loaded here (build constraints, cgo?)", c.relative(file))
	}
	f, err := parser.ParseFile(c.fset, file, src, parser.SkipObjectResolution)
	if err != nil {
		return fmt.Errorf("does not parse: %s", c.relative(err.Error()))
	}
	for _, p := range pkgs {
		changed, err := c.typeCheck(p, f, nil)
		if err != nil {
			return err
		}
		for _, x := range c.externalTests[p.ID] {
			if _, err := c.typeCheck(x, nil, changed); err != nil {
				return err
			}
		}
	}
	return nil
}

// typeCheck checks p from its parsed files, f in place of the file of the
// same name, importing dep in place of the loaded package of its path.
func (c *compiler) typeCheck(p *packages.Package, f *ast.File, dep *types.Package) (*types.Package, error) {
	files := slices.Clone(p.Syntax)
	if f != nil {
		name := c.fset.File(f.FileStart).Name()
		i := slices.IndexFunc(files, func(s *ast.File) bool { return c.fset.File(s.FileStart).Name() == name })
		if i < 0 {
			return nil, fmt.Errorf("%s: no parsed file %s", p.ID, name)
		}
		files[i] = f
	}
	var errs []error
	conf := types.Config{
		Importer: importerFunc(func(path string) (*types.Package, error) {
			switch imp := p.Imports[path]; {
			case path == "unsafe":
				return types.Unsafe, nil
			case dep != nil && path == dep.Path():
				return dep, nil
			case imp != nil && imp.Types != nil:
				return imp.Types, nil
			}
			return nil, fmt.Errorf("%s imports %s, which was not loaded", p.ID, path)
		}),
		Sizes: p.TypesSizes,
		Error: func(err error) { errs = append(errs, err) },
	}
	if p.Module != nil && p.Module.GoVersion != "" {
		conf.GoVersion = "go" + p.Module.GoVersion
	}
	tp, _ := conf.Check(p.PkgPath, c.fset, files, nil)
	if len(errs) > 0 {
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = c.relative(e.Error())
		}
		return nil, errors.New("does not compile: " + strings.Join(limit(msgs, 3), " | "))
	}
	return tp, nil
}

// relative shortens the repository's absolute paths in msg.
func (c *compiler) relative(msg string) string {
	return strings.ReplaceAll(msg, c.root+string(filepath.Separator), "")
}

type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }

// limit keeps the first n of s and says how many it left out.
func limit(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	return append(slices.Clone(s[:n]), fmt.Sprintf("(%d more)", len(s)-n))
}
