package docs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// Code, tests and deployment files point readers at the docs in prose, not
// in links: `docs/limits.md` or `(docs/limits.md, "Quotas and sliding
// windows")`, a page and the heading (or the bold lead of a paragraph)
// where the reader finds what is meant.

var (
	// docRef is a page under docs/ named from the repository's root, not
	// part of a longer path (../docs/x.md is a relative link, which
	// TestLinksResolve reads; a URL's /docs/ is another site's).
	docRef = regexp.MustCompile(`(^|[^/\w.-])docs/([\w.-]+\.md)((?:'s|,)?\s+"([^"\n]+)")?`)
	// wrap joins a comment's lines, so a heading's words broken across
	// two lines of a comment read as one.
	wrap     = regexp.MustCompile(`[ \t]*\n[ \t]*(?:(?://|#)[ \t]*)?`)
	boldLead = regexp.MustCompile(`^\*\*([^*]+)\*\*`)
)

// referenceFile reports whether a file is of a kind whose prose may name
// a page.
func referenceFile(name string) bool {
	switch filepath.Ext(name) {
	case ".go", ".yml", ".yaml", ".sh", ".md", ".conf", ".cfg", ".service", ".lua":
		return true
	}
	return name == "Makefile" || strings.HasPrefix(name, "Dockerfile")
}

// sections are the places a page's reader can find by name: its headings
// and the bold leads of its paragraphs, without a final full stop.
func sections(page string) []string {
	var out []string
	for _, line := range prose(page) {
		var s string
		if m := heading.FindStringSubmatch(line); m != nil {
			s = m[1]
		} else if m := boldLead.FindStringSubmatch(strings.TrimLeft(line, " -")); m != nil {
			s = m[1]
		} else {
			continue
		}
		out = append(out, strings.TrimSuffix(strings.TrimSpace(s), "."))
	}
	return out
}

// danglingReferences lists the references of the file at name (its text
// given) to a page under docs/ that does not exist, or to a heading or
// bold lead the page does not have (a reference may name the start of a
// heading: "When is Redis down" finds "When is Redis down: the sweep").
// sectionsOf returns a page's sections, or an error when there is no such
// page. It returns the number of references read too.
func danglingReferences(name, text string, sectionsOf func(string) ([]string, error)) (dangling []string, refs int) {
	if !strings.Contains(text, "docs/") {
		return nil, 0
	}
	var out []string
	joined := wrap.ReplaceAllString(text, " ")
	matches := docRef.FindAllStringSubmatch(joined, -1)
	for _, m := range matches {
		file, section := m[2], m[4]
		secs, err := sectionsOf(file)
		if err != nil {
			out = append(out, fmt.Sprintf("%s: docs/%s: no such page", name, file))
			continue
		}
		if section == "" {
			continue
		}
		found := false
		for _, s := range secs {
			if strings.HasPrefix(s, section) {
				found = true
				break
			}
		}
		if !found {
			out = append(out, fmt.Sprintf("%s: docs/%s, %q: no such heading", name, file, section))
		}
	}
	return out, len(matches)
}

// TestDocReferencesResolve: every page under docs/ that the repository's
// code, tests, scripts, deployment files and other pages name in prose
// exists, with the heading they name, so splitting or renaming a page
// fails here until what points at it follows.
func TestDocReferencesResolve(t *testing.T) {
	pages := make(map[string][]string)
	sectionsOf := func(file string) ([]string, error) {
		if s, ok := pages[file]; ok {
			return s, nil
		}
		b, err := os.ReadFile(filepath.Join(repoRoot, "docs", file))
		if err != nil {
			return nil, err
		}
		pages[file] = sections(string(b))
		return pages[file], nil
	}
	var files []string
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", "var", "node_modules", "mixin-out":
				return filepath.SkipDir
			}
			return nil
		}
		// This file's examples name pages that do not exist on purpose.
		if referenceFile(d.Name()) && d.Name() != "references_test.go" {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	refs := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(repoRoot, f)
		dangling, n := danglingReferences(filepath.ToSlash(rel), string(b), sectionsOf)
		refs += n
		for _, d := range dangling {
			t.Error(d)
		}
	}
	if refs < 30 {
		t.Fatalf("found only %d references to docs/ in %d files: is the walk reading the tree?", refs, len(files))
	}
}

// TestDanglingReferencesAreFound: the check above reports a missing page
// and a missing heading, reads a heading broken across comment lines, and
// takes a heading's start, a bold lead, a possessive and a relative link or
// URL as what they are.
func TestDanglingReferencesAreFound(t *testing.T) {
	pages := map[string]string{
		"limits.md":         "# Limits\n\n## Quotas and sliding windows\n\n**When Redis loses its data.** It restarts.\n\n- **Leases in a list.** x\n",
		"limiter-design.md": "# Design\n\n## When is Redis down: the rule\n",
	}
	sectionsOf := func(f string) ([]string, error) {
		if s, ok := pages[f]; ok {
			return sections(s), nil
		}
		return nil, os.ErrNotExist
	}
	code := strings.Join([]string{
		`// judged by its rule (docs/limiter-design.md, "When is`,
		`// Redis down") and counted`,
		`# (docs/limits.md, "When Redis loses its data"): AOF`,
		`// docs/limits.md's "Quotas and sliding windows" and docs/limits.md "Leases in a list"`,
		`// see ../docs/gone.md and https://example.com/docs/gone.md`,
		`// docs/limits.md says why`,
		`// docs/gone.md is stale`,
		`// (docs/limits.md, "When is Redis down")`,
		`// (docs/limiter-design.md, "The rule")`,
	}, "\n")
	got, n := danglingReferences("x.go", code, sectionsOf)
	if n != 8 {
		t.Errorf("read %d references, want 8", n)
	}
	want := []string{
		`x.go: docs/gone.md: no such page`,
		`x.go: docs/limits.md, "When is Redis down": no such heading`,
		`x.go: docs/limiter-design.md, "The rule": no such heading`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("dangling:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
