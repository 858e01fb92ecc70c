package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// repoRoot is where the module's files are; the test runs in docs/.
const repoRoot = ".."

// linkedPages are the pages whose relative links must resolve: the README,
// every page here, and the other READMEs they send readers to.
func linkedPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) < 5 {
		t.Fatalf("found only %d pages under docs/", len(pages))
	}
	for _, p := range []string{"README.md", "deploy/README.md", "backend/README.md", "cmd/vendorctl/README.md"} {
		pages = append(pages, filepath.Join(repoRoot, p))
	}
	return pages
}

var (
	fence    = regexp.MustCompile("^\\s*(```|~~~)")
	codeSpan = regexp.MustCompile("`[^`]*`")
	link     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading  = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
)

// prose returns the lines of a markdown page outside fenced code blocks,
// with inline code removed: what is left is where links and headings are.
func prose(text string) []string {
	var out []string
	inFence := false
	for _, line := range strings.Split(text, "\n") {
		if fence.MatchString(line) {
			inFence = !inFence
			out = append(out, "")
			continue
		}
		if inFence {
			out = append(out, "")
			continue
		}
		out = append(out, line)
	}
	return out
}

// anchors are the fragment ids a page's headings get, as GitHub makes
// them: lower case, punctuation dropped, spaces to hyphens, a repeated one
// numbered.
func anchors(text string) map[string]bool {
	out := make(map[string]bool)
	seen := make(map[string]int)
	for _, line := range prose(text) {
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		slug := slugOf(m[1])
		if n := seen[slug]; n > 0 {
			out[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

func slugOf(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// brokenLinks lists the relative links of the page at path (its text given)
// that name no file, or a heading its target does not have. read returns a
// file's text, or an error when there is none.
func brokenLinks(path, text string, read func(string) (string, error)) []string {
	var broken []string
	for i, line := range prose(text) {
		for _, m := range link.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			where, body := path, text
			if file != "" {
				where = filepath.Join(filepath.Dir(path), file)
				var err error
				if body, err = read(where); err != nil {
					broken = append(broken, fmt.Sprintf("%s:%d: %s: no such file", path, i+1, target))
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(where, ".md") && !anchors(body)[anchor] {
				broken = append(broken, fmt.Sprintf("%s:%d: %s: %s has no heading #%s", path, i+1, target, filepath.Base(where), anchor))
			}
		}
	}
	return broken
}

// readPage reads a file's text; a directory counts as existing, with no
// headings.
func readPage(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if st.IsDir() {
		return "", nil
	}
	data, err := os.ReadFile(path)
	return string(data), err
}

// TestLinksResolve: every relative link in the README and the pages under
// docs/ names a file of the repository, and a heading of it when it names
// one, so moving a section or a page breaks a test, not a reader's click.
func TestLinksResolve(t *testing.T) {
	links := 0
	for _, page := range linkedPages(t) {
		text, err := readPage(page)
		if err != nil {
			t.Fatal(err)
		}
		links += len(link.FindAllString(text, -1))
		for _, b := range brokenLinks(page, text, readPage) {
			t.Error(b)
		}
	}
	if links < 50 {
		t.Fatalf("found only %d links: is the parser reading the pages?", links)
	}
}

// TestBrokenLinksAreFound: the check above reports a missing file, a
// missing heading in another page and in the same page, and leaves alone
// links in code, absolute URLs and headings that do exist.
func TestBrokenLinksAreFound(t *testing.T) {
	files := map[string]string{
		"a.md":     "# Top\n\n## Leases: how exact\n\n## Leases: how exact\n",
		"dir/b.md": "",
	}
	read := func(p string) (string, error) {
		if s, ok := files[filepath.ToSlash(p)]; ok {
			return s, nil
		}
		return "", os.ErrNotExist
	}
	page := strings.Join([]string{
		"# Here",
		"[ok](a.md#leases-how-exact) [ok](a.md#leases-how-exact-1) [ok](dir/b.md) [ok](#here) [ok](https://example.com/x.md)",
		"`[in code](gone.md)`",
		"```",
		"[in a fence](gone.md)",
		"```",
		"[missing file](gone.md)",
		"[missing heading](a.md#leases)",
		"[missing here](#nowhere)",
	}, "\n")
	got := brokenLinks("p.md", page, read)
	want := []string{
		"p.md:7: gone.md: no such file",
		"p.md:8: a.md#leases: a.md has no heading #leases",
		"p.md:9: #nowhere: p.md has no heading #nowhere",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("broken links:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
