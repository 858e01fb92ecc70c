package reports

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
)

func TestGenerateOpenRemove(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "reports")
	s, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	id := uuid.NewString()
	p, err := s.Generate(Info{OrderID: id, Service: "mvr", Environment: "sandbox", MCNumber: "MC1",
		DriverName: "Ann Lee", LicenseNumber: "D1", LicenseState: "TX", CompletedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	f, size, err := s.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if int64(len(b)) != size || !bytes.HasPrefix(b, []byte("%PDF-1.")) || !bytes.Contains(b, []byte("%%EOF")) || size < 500 {
		t.Fatalf("generated report: %d bytes, %q", size, b[:min(len(b), 16)])
	}
	staff := []byte("%PDF-1.4\nfrom staff\n%%EOF")
	p2, err := s.Write(id, "psp", staff)
	if err != nil {
		t.Fatal(err)
	}
	f, _, _ = s.Open(p2)
	got, _ := io.ReadAll(f)
	f.Close()
	if !bytes.Equal(got, staff) {
		t.Fatalf("written report = %q", got)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, id))
	if len(entries) != 2 {
		t.Fatalf("files left in the order folder: %v", entries) // no temporary files
	}
	if err := s.RemoveOrder(id); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Open(p); err != ErrNoFile {
		t.Fatalf("open after remove: %v", err)
	}
}

func TestPathsStayInsideTheDirectory(t *testing.T) {
	s, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range [][2]string{{"../../etc", "mvr"}, {uuid.NewString(), "../x"}, {uuid.NewString(), "driver_reviews"}} {
		if _, err := s.Write(c[0], c[1], []byte("%PDF-")); err == nil {
			t.Errorf("Write(%q, %q) accepted", c[0], c[1])
		}
	}
	if err := s.RemoveOrder("../.."); err == nil {
		t.Error("RemoveOrder(../..) accepted")
	}
}
